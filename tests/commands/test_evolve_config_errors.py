"""A bad value in one of evolve's backbones is named as the user wrote it, with its file and line
(docs audit, session 39)."""

import re

import pytest

_CONFIG = """\
backbones:
  - name: student
    model: embedded:student
    kind: hf
    input_price: 1.0
    output_price: 2.0
  - name: teacher
    model: embedded:teacher
    kind: {kind}
{teacher_prices}
output: {output}
progress: false
"""


def _run(tmp_path, capsys, kind="hf", teacher_prices="    input_price: 4.0\n    output_price: 8.0"):
    from lightning_agents.cli import cli_main

    path = tmp_path / "pool.yaml"
    path.write_text(_CONFIG.format(kind=kind, teacher_prices=teacher_prices, output=tmp_path / "out"))
    with pytest.raises(SystemExit) as exc:
        cli_main(["evolve", "--config", str(path)])
    assert exc.value.code == 2
    return path, capsys.readouterr().err.strip().splitlines()[-1]


def test_a_wrong_type_in_a_backbone_names_the_item_value_type_and_line(tmp_path, capsys):
    # Before: "backbones.init_args.output_price: class_path 'lightning_agents.BackboneSpec': Parser key
    # "output_price": (pool.yaml:6)" -- a key path nobody writes, no problem, and the student's line.
    path, err = _run(tmp_path, capsys, teacher_prices="    input_price: 4.0\n    output_price: eight")
    assert err.endswith(f"backbones[1].output_price (teacher): expected float or null, got 'eight' ({path}:11)"), err


def test_a_bad_choice_in_a_later_backbone_names_that_backbone(tmp_path, capsys):
    path, err = _run(tmp_path, capsys, kind="hff")
    assert err.endswith(f"backbones[1].kind (teacher): 'hff' is not one of 'hf', 'openai' ({path}:9)"), err


def test_an_unknown_key_in_a_backbone_is_named_with_its_backbone(tmp_path, capsys):
    path, err = _run(tmp_path, capsys, teacher_prices="    input_price: 4.0\n    output_price: 8.0\n    bogus: 1")
    assert err.endswith(f"backbones[1].bogus (teacher): no such setting ({path}:12)"), err


@pytest.mark.parametrize(
    ("prices", "message", "line"),
    [
        # the price is missing: the backbone's `name:` line
        ("    output_price: 8.0", "backbone 'teacher' has no input_price", 7),
        ("    input_price: 4.0\n    output_price: -8.0", "backbone 'teacher': output_price must be a finite", 11),
    ],
)
def test_a_backbone_price_error_says_where_the_backbone_is(tmp_path, capsys, prices, message, line):
    # Before: the message named no file and no line.
    path, err = _run(tmp_path, capsys, teacher_prices=prices)
    assert message in err and err.endswith(f"({path}:{line})"), err
    assert re.match(r"lightning-agents: error: ", err)
