"""Files the package writes get the permissions a plain ``open()`` would give them."""

import os
import stat

from lightning_agents.atomic import atomic_write_text


def test_new_files_follow_the_umask_and_replaced_files_keep_their_mode(tmp_path):
    # mkstemp makes 0600 files: curate's sft.jsonl and every report were unreadable to other
    # users (a training job under another uid on a shared cluster).
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "sft.jsonl", "{}\n")
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        os.umask(0o077)
        assert stat.S_IMODE(atomic_write_text(tmp_path / "private.json", "{}").stat().st_mode) == 0o600
        os.chmod(path, 0o664)
        atomic_write_text(path, "{}\n{}\n")
        assert stat.S_IMODE(path.stat().st_mode) == 0o664 and path.read_text() == "{}\n{}\n"
    finally:
        os.umask(old)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
