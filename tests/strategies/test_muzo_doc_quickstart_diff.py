"""docs/muzo.md lists every way configs/muzo_quickstart.yaml differs from configs/quickstart.yaml
(docs audit, session 39): it said only the optimizer, the strategy, steps, validation, run folder
and answer length changed, but the MUZO config also drops the model's AdamW settings and writes
out data.tokenizer."""

from pathlib import Path

import yaml

ROOT = Path(__file__).parents[2]


def _flat(node, prefix=""):
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): node}


def test_every_model_and_data_setting_that_differs_is_named_in_the_doc():
    sft = _flat(yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text()))
    muzo = _flat(yaml.safe_load((ROOT / "configs" / "muzo_quickstart.yaml").read_text()))
    doc = " ".join((ROOT / "docs" / "muzo.md").read_text().split())
    for key in sorted(set(sft) | set(muzo)):
        if not key.startswith(("model.", "data.")) or sft.get(key) == muzo.get(key):
            continue
        name = key.split(".")[-1]
        value = sft[key] if key in sft else muzo[key]
        assert f"`{name}: {value}`" in doc or f"`data.{name}: {value}`" in doc, (key, value)
