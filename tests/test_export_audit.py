"""Export faults found in the post-training audit (embedded student; the SmolLM2 checks are in
test_export_audit_real.py): where an export may write, what a failed write leaves, which tokens end
generation in the exported folder, and errors that name the checkpoint."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_agents import ChatDataModule, SFTModule
from lightning_agents.adapters import AdapterConfig
from lightning_agents.callbacks import ExportHF
from lightning_agents.commands import ExportCommand
from lightning_agents.export import ExportError, export_hf_folder
from lightning_agents.models import load_model_and_tokenizer

CHAT = [{"role": "user", "content": "Ava has 3 apples and gets 4 more. How many apples does Ava have now?"}]


def _fit(root, callbacks=(), steps=1):
    L.seed_everything(0)
    module = SFTModule(lr=2e-2, adapter=AdapterConfig(rank=4))
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        limit_val_batches=0,
        callbacks=[ModelCheckpoint(dirpath=root / "ckpt", save_last=True), *callbacks],
    )
    trainer.fit(module, ChatDataModule(embedded_size=16, batch_size=8, max_length=128, val=None))
    return trainer


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    _fit(root)
    return root / "ckpt" / "last.ckpt"


@pytest.fixture
def student():
    return load_model_and_tokenizer("embedded:student")


def test_a_non_empty_folder_that_is_not_an_export_is_refused_and_left_alone(student, tmp_path):
    """Before: the model files were written among the folder's own (a run's checkpoints, say)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "last.ckpt").write_text("mine")
    with pytest.raises(ExportError, match=rf"{folder} is a non-empty folder that is not an export.*last\.ckpt"):
        export_hf_folder(*student, folder, overwrite=True)
    assert [p.name for p in folder.iterdir()] == ["last.ckpt"]


def test_an_earlier_export_is_replaced_whole_and_only_with_overwrite(ckpt, tmp_path):
    """Before: a merged export over an adapters-only one left adapter_config.json beside the merged
    weights, a folder transformers loads as base + adapters and vLLM as a plain model."""
    out = tmp_path / "out"
    ExportCommand().export(ckpt_path=str(ckpt), output=str(out), merge=False)
    with pytest.raises(ExportError, match=rf"{out} already holds an export; pass overwrite=true"):
        ExportCommand().export(ckpt_path=str(ckpt), output=str(out))
    assert (out / "adapter_config.json").is_file()  # the refused export changed nothing
    ExportCommand().export(ckpt_path=str(ckpt), output=str(out), overwrite=True)
    names = {p.name for p in out.iterdir()}
    assert "model.safetensors" in names and not names & {"adapter_config.json", "adapter_model.safetensors"}
    assert json.loads((out / "lightning_agents_export.json").read_text())["merged"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left


def test_a_full_disk_leaves_no_folder_that_looks_like_an_export(student, tmp_path, monkeypatch):
    """Before: config.json and the weights stayed in the folder without the tokenizer, and the
    error (OSError, or safetensors' own) did not name the folder."""
    model, tokenizer = student

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tokenizer, "save_pretrained", full)
    out = tmp_path / "hf"
    with pytest.raises(ExportError, match=rf"cannot write the export {out}: .*No space left on device"):
        export_hf_folder(model, tokenizer, out)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_replacement_keeps_the_earlier_export(student, tmp_path, monkeypatch):
    model, tokenizer = student
    out = export_hf_folder(model, tokenizer, tmp_path / "hf")
    before = sorted(p.name for p in out.iterdir())
    monkeypatch.setattr(tokenizer, "save_pretrained", lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(ExportError, match="disk gone"):
        export_hf_folder(model, tokenizer, out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def _marker(folder):
    return json.loads((folder / "lightning_agents_export.json").read_text())


def test_a_symlink_to_an_empty_folder_is_written_at_its_target(student, tmp_path):
    """HPC setups link the output to a big disk (export -> /scratch/...). Before: the staged
    folder was renamed onto the link, which failed with 'Not a directory'."""
    (tmp_path / "scratch").mkdir()
    (tmp_path / "home").mkdir()
    link = tmp_path / "home" / "export"
    link.symlink_to(tmp_path / "scratch")
    assert export_hf_folder(*student, link) == link
    assert link.is_symlink() and (tmp_path / "scratch" / "model.safetensors").is_file()
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["export"]


def test_a_symlink_to_an_earlier_export_is_overwritten_at_its_target(student, tmp_path):
    """Before: overwrite replaced the link by a real folder on the link's filesystem, left the old
    weights on scratch and a dangling `.export.old-PID` link beside it."""
    (tmp_path / "scratch").mkdir()
    (tmp_path / "home").mkdir()
    link = tmp_path / "home" / "export"
    link.symlink_to(tmp_path / "scratch" / "e")
    export_hf_folder(*student, tmp_path / "scratch" / "e", metadata={"run": "earlier"})
    export_hf_folder(*student, link, overwrite=True, metadata={"run": "new"})
    assert link.is_symlink() and _marker(tmp_path / "scratch" / "e")["run"] == "new"
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["export"]
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == ["e"]


def test_staging_left_by_a_killed_export_is_removed_and_a_live_ones_kept(student, tmp_path):
    """Before: a killed export left `.hf.partial-PID`, a full copy of the weights, for ever (the next
    export has another PID). Only folders of processes gone from this machine are removed."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    left = [f".hf.partial-{host}-{dead.pid}", f".hf.partial-{dead.pid}", f".hf.old-{host}-{dead.pid}"]
    kept = [f".hf.partial-{host}-{os.getppid()}", f".hf.partial-{host}.other-{dead.pid}"]  # alive; another machine
    for name in left + kept:
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_text("weights")
    export_hf_folder(*student, tmp_path / "hf")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["hf", *kept])


@pytest.fixture
def mount_point(monkeypatch):
    """Make a folder behave as a mount point: ismount says so, and renaming or removing it fails
    with EBUSY (as a Docker volume does). ``visible=False``: a bind mount ismount does not see."""

    def make(folder, visible=True):
        busy = folder.absolute()
        replace, rmdir, ismount = os.replace, os.rmdir, os.path.ismount

        def refuse(fn):
            def call(src, dst=None, *args, **kwargs):
                if busy in (Path(src).absolute(), dst and Path(dst).absolute()):
                    raise OSError(errno.EBUSY, "Device or resource busy", str(busy))
                return fn(src, *args, **kwargs) if dst is None else fn(src, dst, *args, **kwargs)

            return call

        monkeypatch.setattr(os, "replace", refuse(replace))
        monkeypatch.setattr(os, "rmdir", refuse(rmdir))
        if visible:
            monkeypatch.setattr(os.path, "ismount", lambda p: Path(p).absolute() == busy or ismount(p))
        return folder

    return make


@pytest.mark.parametrize("visible", [True, False], ids=["mount point", "bind mount ismount misses"])
def test_a_mount_point_is_written_in_place(student, tmp_path, mount_point, visible):
    """Before: the whole model was written beside the volume, on the parent filesystem, then the
    rename failed with EBUSY and the error said 'nothing was written there'."""
    out = tmp_path / "export"
    out.mkdir()
    mount_point(out, visible)
    export_hf_folder(*student, out, metadata={"run": "first"})
    export_hf_folder(*student, out, overwrite=True, metadata={"run": "second"})
    assert _marker(out)["run"] == "second" and (out / "model.safetensors").is_file()
    assert not (out / ".lightning_agents_export.partial").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_failed_in_place_write_says_what_it_removed(student, tmp_path, monkeypatch, mount_point):
    """The earlier export in a mount point is removed before the new one is written: the error
    says so rather than 'nothing was written there', and leaves an empty folder to retry into."""
    model, tokenizer = student
    out = export_hf_folder(model, tokenizer, tmp_path / "export")
    mount_point(out)
    monkeypatch.setattr(tokenizer, "save_pretrained", lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(
        ExportError, match=r"disk gone \(it is a mount point, .*the earlier export there was removed"
    ) as err:
        export_hf_folder(model, tokenizer, out, overwrite=True)
    assert "nothing was written" not in str(err.value)
    assert list(out.iterdir()) == []


def test_a_folder_whose_parent_is_not_writable_is_written_in_place(student, tmp_path, monkeypatch):
    """A folder made for the user inside a shared directory they cannot write: no staging folder
    can go beside it. Before: 'Permission denied (nothing was written there)'."""
    out = tmp_path / "export"
    out.mkdir()
    mkdir = Path.mkdir

    def refuse_beside(self, *args, **kwargs):
        if self.parent == out.parent and self != out:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refuse_beside)
    export_hf_folder(*student, out)
    assert (out / "model.safetensors").is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_an_interrupted_in_place_export_is_replaced_by_the_next(student, tmp_path):
    """What a killed in-place write leaves (its files and the in-progress marker, no
    lightning_agents_export.json) is not an export, nor the user's: the next export replaces it."""
    out = tmp_path / "export"
    out.mkdir()
    (out / ".lightning_agents_export.partial").write_text("")
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_text("cut short")
    export_hf_folder(*student, out)
    assert _marker(out)["merged"] is False and not (out / ".lightning_agents_export.partial").exists()


def test_generation_stops_at_the_templates_end_of_turn(student, tmp_path):
    """A base checkpoint's EOS (<|endoftext|>) is not ChatML's <|im_end|>. Before: the exported
    generation_config.json kept the base's EOS alone, and `generate` on the export ran every
    answer on to max_new_tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = student
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config.eos_token_id = tokenizer.pad_token_id  # a base model's other EOS
    out = export_hf_folder(model, tokenizer, tmp_path / "hf")
    assert model.generation_config.eos_token_id == tokenizer.pad_token_id  # the trained model is not changed
    exported = AutoModelForCausalLM.from_pretrained(out)
    assert exported.generation_config.eos_token_id == [tokenizer.pad_token_id, im_end]
    tok = AutoTokenizer.from_pretrained(out)
    inputs = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    generated = exported.generate(**inputs, max_new_tokens=40, do_sample=False)[0, inputs["input_ids"].shape[1] :]
    assert generated[-1] == im_end and len(generated) < 40, tok.decode(generated)


def test_an_adapters_only_export_warns_when_its_base_would_not_stop(ckpt, tmp_path, monkeypatch):
    """The base's generation config serves an adapters-only folder: the export cannot fix it, so it says so."""
    from lightning_agents import export

    module = export.load_trained_module(ckpt)
    module.model.generation_config.eos_token_id = module.tokenizer.pad_token_id
    with pytest.warns(UserWarning, match=r"not at \['<\|im_end\|>'\]"):
        export_hf_folder(module.model, module.tokenizer, tmp_path / "a", merge=False)


def test_a_checkpoint_of_another_model_is_named_with_the_mismatch(ckpt, tmp_path):
    """Before: torch's RuntimeError listing every size mismatch, without the checkpoint's path."""
    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["hyper_parameters"]["model"] = "embedded:teacher"
    torch.save(checkpoint, tmp_path / "other.ckpt")
    with pytest.raises(ExportError, match=r"other\.ckpt: its weights do not fit its base model 'embedded:teacher' \("):
        ExportCommand().export(ckpt_path=str(tmp_path / "other.ckpt"), output=str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()


def test_a_checkpoint_whose_base_is_gone_names_the_checkpoint(ckpt, tmp_path):
    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["hyper_parameters"]["model"] = str(tmp_path / "moved")
    torch.save(checkpoint, tmp_path / "moved.ckpt")
    with pytest.raises(ExportError, match=rf"moved\.ckpt: its base model \(model='{tmp_path}/moved'.*does not exist"):
        ExportCommand().export(ckpt_path=str(tmp_path / "moved.ckpt"), output=str(tmp_path / "o"))


def test_export_hf_refuses_a_foreign_folder_before_training_and_replaces_its_own(tmp_path):
    """Before: ExportHF wrote into any folder at the end of fit."""
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("mine")
    trainer = None
    with pytest.raises(ExportError, match=rf"{foreign} is a non-empty folder"):
        trainer = _fit(tmp_path / "a", callbacks=[ExportHF(output=str(foreign))])
    assert trainer is None and not (tmp_path / "a" / "ckpt").exists()  # stopped before any step
    # Its own earlier export (the same config run again) is replaced.
    for _ in range(2):
        _fit(tmp_path / "b", callbacks=[ExportHF(output="hf")])
    assert json.loads((tmp_path / "b" / "hf" / "lightning_agents_export.json").read_text())["step"] == 1


@pytest.mark.parametrize(
    ("template", "eos", "ends"),
    [
        ("qwen2_5", "<|im_end|>", ["<|im_end|>"]),
        ("qwen3", "<|im_end|>", ["<|im_end|>"]),
        ("llama3_1", "<|eot_id|>", ["<|eot_id|>"]),
        ("phi3_5", "<|endoftext|>", ["<|end|>"]),  # Phi-3.5's generation_config lists <|end|> beside its EOS
        ("deepseekv3", "<｜end▁of▁sentence｜>", ["<｜end▁of▁sentence｜>"]),
        ("smollm2", "<|endoftext|>", ["<|im_end|>"]),  # a ChatML fine-tune of a base model
    ],
)
def test_turn_end_tokens_of_real_templates(shared_data, template, eos, ends):
    from chat_template_helpers import tokenizer_with_template

    from lightning_agents.datamodules.conversations import turn_end_token_ids
    from lightning_agents.models import load_tokenizer

    text = (shared_data / "chat_templates" / f"{template}.jinja").read_text()
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), text, None, eos)
    assert tok.convert_ids_to_tokens(turn_end_token_ids(tok)) == ends


def test_a_qlora_checkpoint_exports_on_its_unquantized_base(ckpt, tmp_path):
    """Before: export rebuilt a QLoRA run on its 4-bit base, so without a GPU it was refused as "weights
    that do not fit its base model ... written by a run of another model, or cut short?" (and with one,
    the adapters were merged into 4-bit weights that --dtype could not cast). Now the adapters merge
    into the unquantized base, as the QLoRA recipe does; the adapter tensors are those of the run."""
    from transformers import AutoModelForCausalLM

    from lightning_agents.export import load_trained_module

    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["hyper_parameters"]["adapter"]["qlora"] = True  # as SFTModule(adapter={qlora: true}) saves it
    checkpoint["hyper_parameters"]["quantization"] = {
        "bits": 4,
        "quant_type": "nf4",
        "double_quant": True,
        "compute_dtype": "bfloat16",
    }
    qlora = tmp_path / "qlora.ckpt"
    torch.save(checkpoint, qlora)
    ids = torch.randint(3, 400, (1, 12))
    with torch.no_grad():
        want = load_trained_module(ckpt).model(ids).logits
    out = ExportCommand().export(ckpt_path=str(qlora), output=str(tmp_path / "merged"))
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(exported(ids).logits, want, rtol=0, atol=1e-4)
    ExportCommand().export(ckpt_path=str(qlora), output=str(tmp_path / "adapters"), merge=False)
    assert (tmp_path / "adapters" / "adapter_model.safetensors").is_file()
