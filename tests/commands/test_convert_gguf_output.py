"""convert's output next to a GGUF file: what README promises and what the check does agree
(docs audit, session 39).

README said a folder that "lies inside the source" is refused, and the check's docstring counted a
``.gguf`` file's folder as the source's folder; the check compares with the file itself, so a new
folder beside the file is accepted -- as README's own ``convert --source model.gguf --output folder``
needs. The docs now say so; these tests pin both.
"""

from pathlib import Path

import pytest


@pytest.fixture
def gguf(tmp_path):
    folder = tmp_path / "ggufdir"
    folder.mkdir()
    path = folder / "model.Q4_1.gguf"
    path.write_bytes(b"GGUF" + b"\0" * 64)
    return path


@pytest.mark.parametrize("named", ["file", "folder::file"])
def test_a_new_folder_beside_a_gguf_file_is_accepted_and_its_folder_refused(gguf, named):
    from lightning_agents.commands.convert import ConvertError, check_output_folder

    source = str(gguf) if named == "file" else f"{gguf.parent}::{gguf.name}"
    check_output_folder(str(gguf.parent / "hf"), source)  # beside the file: deletes nothing
    for holder in (gguf.parent, gguf.parent.parent):
        with pytest.raises(ConvertError, match="holds the source"):
            check_output_folder(str(holder), source)


def test_readme_says_a_folder_beside_a_gguf_source_is_fine():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    text = " ".join(readme.split())
    assert "for a `.gguf` source the source is the file: its folder and those above it are refused" in text
    assert "a new folder beside it, as `folder` above, is fine" in text
