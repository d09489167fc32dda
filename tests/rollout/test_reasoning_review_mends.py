"""Review mends of fc442d0 (Solar-Open replies read with their markers), session 44.

fc442d0 re-decoded a Solar-Open reply from its token ids in ``run_agent_loop`` / ``run_agent_rl``
only, and split the engines' decoded text ``RSNassistantANS`` at a glued ``assistant``. The review
(/work/h44/review_reasoning) found: every single-turn reader of the engines' texts still scored the
reasoning (MED3), HFlow's local backbone still parsed no call (MED2), a trailing ``<|flush|>`` the
engine's stop list lacked stayed in the answer (MED1), and the decoded rule split answers at their
own ``self.assistant`` (LOW1). Now the engines hand a Solar-Open reply over with its marker tokens
(``hf_engine.decode_completions``, used by ``HFGenerationEngine`` and both vLLM engines through
``pack_completions``), less the end token it stopped at, and ``strip_reasoning`` (what every
verifier reads) and ``split_reasoning`` (the rollout's) read those markers.

The tokenizer is the embedded student with Solar-Open's real template
(tests/data/tool_call_outputs/templates/upstage-Solar-Open-100B.jinja), its ``<|...|>`` tokens special,
the real EOS ``<|endoftext|>``, ``<|flush|>`` added (the fixture of test_reasoning_special_tokens.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from chat_template_helpers import OUTPUTS
from test_agent_rl_real_templates import _ScriptedTokens
from test_reasoning_special_tokens import solar_tokenizer
from vllm_server_fake import sample

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_loop, run_agent_rl
from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, model_tool_call_style, start_episode
from lightning_agents.rollout.hf_engine import stop_token_ids
from lightning_agents.rollout.tool_calls import split_reasoning
from lightning_agents.tasks import CalculatorTask, strip_reasoning

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"
CALL = (
    "<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>calculator"
    '<|tool_call:args|>{"expression": "17*23"}<|tool_call:end|>'
)


@pytest.fixture(scope="module")
def tok():
    return solar_tokenizer()


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _decoded(tok, text):
    """``text`` decoded without its special tokens (what the engines handed over before)."""
    return tok.decode(_ids(tok, text), skip_special_tokens=True)


class _ScriptedModel(torch.nn.Module):
    """A causal LM for ``HFGenerationEngine`` that "samples" the scripted replies' token ids."""

    def __init__(self, replies):
        super().__init__()
        from transformers import GenerationConfig

        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.generation_config = GenerationConfig()
        self.config = SimpleNamespace(max_position_embeddings=None)
        self.replies, self.turn = replies, 0

    def generate(self, input_ids, attention_mask=None, generation_config=None, **kwargs):
        ids = self.replies[min(self.turn, len(self.replies) - 1)]
        self.turn += 1
        completion = torch.tensor([ids] * input_ids.shape[0])
        return SimpleNamespace(sequences=torch.cat([input_ids, completion], dim=1))


def _hf_engine(tok, replies, ends):
    """A real ``HFGenerationEngine`` whose model samples ``replies``, each ending with its ``ends`` token."""
    ids = [_ids(tok, text) + [tok.convert_tokens_to_ids(end)] for text, end in zip(replies, ends)]
    return HFGenerationEngine(_ScriptedModel(ids), tok)


# ------------------------------------------------------------------ the engines' texts
def test_the_hf_engine_hands_a_solar_reply_over_with_its_markers_less_its_end_token(tok):
    """Before: 'The tool says 391.assistantThe answer is 391.' (skip_special_tokens=True)."""
    reply = "<|think|>The tool says 391.<|end|><|begin|>assistant<|content|>The answer is 391."
    engine = _hf_engine(tok, [reply], ["<|flush|>"])
    assert tok.convert_tokens_to_ids("<|flush|>") not in engine.stop_ids  # no generation config given
    out = engine.generate([[{"role": "user", "content": "17*23?"}]], sampling=SamplingConfig(max_new_tokens=64))
    assert out.texts == [reply]
    # the text re-tokenizes to the sampled tokens (RSTG's teacher SFT answer is trained from its text;
    # before, the plain 'RSNassistantANS' was)
    sampled = out.completion_ids[0][out.completion_mask[0].bool()].tolist()
    assert _ids(tok, out.texts[0]) == sampled[:-1]


def test_every_closing_token_at_the_end_is_left_out(tok):
    """Only the last token was dropped: a reply ending ``<|end|><|flush|>`` kept ``<|end|>`` in its answer."""
    import torch

    from lightning_agents.rollout.hf_engine import decode_completions

    ids = _ids(tok, "<|content|>The answer is 5.<|end|><|flush|>")
    (text,) = decode_completions(tok, torch.tensor([ids]), torch.ones(1, len(ids)), [])
    assert text == "<|content|>The answer is 5."
    assert strip_reasoning(text) == "The answer is 5."


def test_a_template_without_marked_delimiters_decodes_as_before():
    """Every other template: the texts are decoded without special tokens, as they always were."""
    tok = load_tokenizer("embedded:student")
    ids = _ids(tok, "It is 391.") + [tok.eos_token_id]
    out = HFGenerationEngine(_ScriptedModel([ids]), tok).generate([[{"role": "user", "content": "17*23?"}]])
    assert out.texts == ["It is 391."]


# ------------------------------------------------------------------ MED 1: the stop id vLLM stopped at
def _answer_turns(gold):
    answer = f"<|think|>The tool says {gold}.<|end|><|begin|>assistant<|content|>The answer is {gold}."
    return [(CALL, "<|calls|>"), (answer, "<|flush|>")]


def _served(tok, server, turns):
    """A ``VLLMServerEngine`` on a fake ``vllm serve`` that samples ``turns`` in order. Its tokenizer
    has no model folder (a hub id's case), so its ``stop_ids`` lack the generation config's
    ``<|flush|>``, where vLLM itself stops at it (``update_from_generation_config``) and names it in
    ``stop_reason``."""
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    def reply(body, k):
        text, end = turns[min(k, len(turns) - 1)]
        end_id = tok.convert_tokens_to_ids(end)
        return [sample(_ids(tok, text) + [end_id], stop_reason=end_id)]

    engine = VLLMServerEngine(server(reply).url, tok)
    assert tok.convert_tokens_to_ids("<|flush|>") not in engine.stop_ids  # the precondition
    return engine


def test_run_agent_rl_over_the_server_engine_stores_no_flush_in_the_answer(tok, server):
    """Before: 'The answer is N.<|flush|>' (run_agent_rl cut only an id in the engine's stop_ids)."""
    task = CalculatorTask(split="val", n=1)
    gold = task.problems[0]["answer"]
    engine = _served(tok, server, _answer_turns(gold))
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    rollout = batch.rollouts[0]
    assert rollout["info"]["tool_calls"] == 1 and rollout["reward"] == 1.0
    assert rollout["traj"][-1] == {
        "role": "assistant",
        "content": f"The answer is {gold}.",
        "reasoning": f"The tool says {gold}.",
    }


def test_run_agent_loop_over_the_server_engine_stores_no_flush_in_the_answer(tok, server):
    task = CalculatorTask(split="val", n=1)
    gold = task.problems[0]["answer"]
    engine = _served(tok, server, _answer_turns(gold))
    (rollout,) = run_agent_loop(engine, task.problems, trials=1, task=task, sampling=SamplingConfig(), max_turns=2)
    assert rollout["traj"][-1]["content"] == f"The answer is {gold}."


def test_an_answer_only_turn_keeps_no_flush(tok, server):
    """Passed before fc442d0 (its decode dropped <|flush|>), failed on fc442d0."""
    task = CalculatorTask(split="val", n=1)
    gold = task.problems[0]["answer"]
    engine = _served(tok, server, [(f"<|content|>The answer is {gold}.", "<|flush|>")])
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=1)
    assert batch.rollouts[0]["traj"][-1]["content"] == f"The answer is {gold}."


def test_the_colocated_vllm_engine_hands_over_the_answer_without_its_flush(tok, monkeypatch):
    """``VLLMGenerationEngine`` lays its samples out with ``pack_completions`` too (a fake ``vllm``)."""
    import sys
    import types

    flush = tok.convert_tokens_to_ids("<|flush|>")
    answer = "<|think|>Multiply.<|end|><|begin|>assistant<|content|>The answer is 391."

    class LLM:
        def __init__(self, **kwargs):
            pass

        def sleep(self, level=1):
            pass

        def wake_up(self):
            pass

        def generate(self, prompts, params, use_tqdm=False):
            ids = _ids(tok, answer) + [flush]
            out = SimpleNamespace(token_ids=ids, logprobs=[{t: SimpleNamespace(logprob=-0.5)} for t in ids])
            out.finish_reason = "stop"
            return [SimpleNamespace(outputs=[out] * p.n) for p in params]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SimpleNamespace))
    from lightning_agents.rollout.vllm_engine import VLLMGenerationEngine

    engine = VLLMGenerationEngine("embedded:student", tok)
    out = engine.generate([[{"role": "user", "content": "17*23?"}]], sampling=SamplingConfig(do_sample=False))
    assert out.texts == [answer]
    assert split_reasoning(out.texts[0], "solar_open") == ("Multiply.", "The answer is 391.")


def test_a_hub_ids_cached_generation_config_is_read(tok, monkeypatch):
    """Before: only a local folder's generation_config.json was read, so a hub id's engine never
    stopped at (nor knew it had stopped at) the config's <|flush|>. Now the local Hugging Face
    cache's copy is read, without a download."""
    from transformers import GenerationConfig

    from lightning_agents.rollout.vllm_engine import local_generation_config

    flush = tok.convert_tokens_to_ids("<|flush|>")
    asked = []

    def cached(path, **kwargs):
        asked.append((path, kwargs))
        return GenerationConfig(eos_token_id=[tok.eos_token_id, flush])

    monkeypatch.setattr(GenerationConfig, "from_pretrained", staticmethod(cached))
    config = local_generation_config("upstage/Solar-Open-100B")
    assert asked == [("upstage/Solar-Open-100B", {"revision": None, "local_files_only": True})]
    assert flush in stop_token_ids(tok, config)


def test_a_hub_ids_cached_generation_config_is_read_at_the_pinned_revision(tmp_path, monkeypatch):
    """A real Hugging Face cache layout with two snapshots: the engine reads the one vLLM loads
    (``llm_kwargs``' ``revision``), not whichever ``refs/main`` points at; nothing is downloaded."""
    import huggingface_hub.constants

    from lightning_agents.rollout.vllm_engine import local_generation_config

    repo = tmp_path / "models--upstage--Solar-Open-100B"
    for sha, end in (("a" * 40, 24), ("b" * 40, 25)):
        (repo / "snapshots" / sha).mkdir(parents=True)
        (repo / "snapshots" / sha / "generation_config.json").write_text(f'{{"eos_token_id": [2, {end}]}}')
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert local_generation_config("upstage/Solar-Open-100B").eos_token_id == [2, 24]
    assert local_generation_config("upstage/Solar-Open-100B", "b" * 40).eos_token_id == [2, 25]
    assert local_generation_config("upstage/Not-Cached") is None


def test_an_engine_without_stop_ids_stores_no_stop_token(tok):
    """run_agent_loop re-decoded with ``getattr(engine, "stop_ids", ())``: an engine with completion
    ids and no ``stop_ids`` stored '<|endoftext|>' in the answer. The loop now reads the engine's text."""
    task = CalculatorTask(split="val", n=1)
    gold = task.problems[0]["answer"]
    engine = _ScriptedTokens(tok, [f"<|content|>The answer is {gold}."])
    del engine.stop_ids
    (rollout,) = run_agent_loop(engine, task.problems, trials=1, task=task, sampling=SamplingConfig(), max_turns=1)
    assert rollout["traj"][-1]["content"] == f"The answer is {gold}."


# ------------------------------------------------------------------ MED 2: HFlow's local backbone
def test_hflow_local_backbone_solar_call_parses(tok):
    """Before: LocalHFBackbone handed over 'a1b2c3d4e5calculator{...}' (decoded without special
    tokens): no call, the turn was taken as the final answer."""
    from lightning_agents.hflow.backbones import LocalHFBackbone, Request

    task = CalculatorTask(split="val", n=1)
    engine = _hf_engine(tok, [CALL], ["<|calls|>"])
    backbone = LocalHFBackbone("solar", input_price=0.1, output_price=0.1, model_object=engine.model, tokenizer=tok)
    backbone._engine = engine
    assert backbone.tool_call_style == "solar_open"
    episode = start_episode(task, task.problems[0], tool_call_style=backbone.tool_call_style)
    (completion,) = backbone._complete([Request(messages=list(episode.messages), max_tokens=64, tools=task.tools)])
    # what operators.py builds from a completion
    step = apply_reply(episode, ModelReply(completion.text, completion.tool_calls, completion.truncated))
    assert [c["function"]["name"] for c in step.assistant.get("tool_calls", [])] == ["calculator"]
    assert step.replies[0]["content"] == "391"


# ------------------------------------------------------------------ MED 3: the single-turn paths
def test_single_turn_scoring_reads_the_answer_not_the_reasoning(tok):
    """evaluate_accuracy over a real HFGenerationEngine (also RSTG/GRPO's scorer over ``out.texts``,
    and commands/generate.py): before, 'So the answer is 10.assistantI counted them all.' scored 1."""
    from lightning_agents.rollout.evaluate import evaluate_accuracy
    from lightning_agents.tasks.answers import extract_stated_answer

    prompt = [{"role": "user", "content": "How many?"}]
    for answer, accuracy in (("I counted them all.", 0.0), ("The answer is 10.", 1.0)):
        reply = f"<|think|>So the answer is 10.<|end|><|begin|>assistant<|content|>{answer}"
        engine = _hf_engine(tok, [reply], ["<|flush|>"])
        result = evaluate_accuracy(
            engine, [prompt], ["10"], lambda text, ref: float(extract_stated_answer(text) == ref)
        )
        assert result["accuracy"] == accuracy


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("<|think|>So the answer is 10.<|end|><|begin|>assistant<|content|>I counted.", "I counted."),
        ("<|content|>The answer is 10.", "The answer is 10."),
        ("<|think|>So the answer is 10.", ""),  # cut mid-thought: no answer
        ("<think>So the answer is 10.</think>I counted.", "I counted."),
        ("The AI-assistant says 10.", "The AI-assistant says 10."),
    ],
    ids=["reasoned", "answer-only", "cut-reasoning", "think-block", "plain"],
)
def test_strip_reasoning_reads_a_solar_reply_with_its_markers(text, answer):
    assert strip_reasoning(text) == answer


# ------------------------------------------------------------------ LOW 1: no decoded-text rule
@pytest.mark.parametrize(
    "answer",
    [
        "Call self.assistant.run() to get 391.",
        "The AI-assistant says 391.",
        'It returns {"role": "assistant"} and 391.',
        "Roles:\nassistant answers 391.",
    ],
    ids=["attribute", "hyphen", "json", "line-start"],
)
def test_an_answer_with_a_glued_assistant_word_is_not_split(tok, answer):
    """Before: decoded, a reply without reasoning was split at the answer's own 'assistant'; the head
    of the answer became a reasoning the model never wrote."""
    for reply in (f"<|content|>{answer}", _decoded(tok, f"<|content|>{answer}")):
        assert split_reasoning(reply, "solar_open") == ("", answer)
        task = CalculatorTask(split="val", n=1)
        episode = start_episode(task, task.problems[0], tool_call_style=model_tool_call_style(tok))
        assert apply_reply(episode, ModelReply(reply)).assistant == {"role": "assistant", "content": answer}


def test_after_reasoning_the_split_is_at_the_role_not_the_answers_word(tok):
    marked = "<|think|>Multiply.<|end|><|begin|>assistant<|content|>The AI-assistant says 391."
    assert split_reasoning(marked, "solar_open") == ("Multiply.", "The AI-assistant says 391.")
    # decoded, nothing tells the reasoning from the answer: it is left whole, not split at a guess
    decoded = _decoded(tok, marked)
    assert split_reasoning(decoded, "solar_open") == ("", decoded)
