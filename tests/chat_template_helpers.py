"""Shared by the tests that attach real chat templates to the embedded tokenizer: the tool schemas
the conversations use, the tokenizer with a template and its special tokens, and the labelled
runs of a tokenized row. (``tests/`` is on ``sys.path`` through its rootdir ``conftest.py``.)
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from lightning_agents.datamodules.conversations import IGNORE_INDEX

#: The special tokens of the eight shared templates.
SPECIAL = re.compile(r"<\|[A-Za-z_]+\|>|<｜[^｜]+｜>|</?(?:tool_call|tool_response|think)>")
#: Also Mistral's ``[TOOL_CALLS]``-style tokens and ``<|...|>`` tokens with digits or dots.
SPECIAL_WIDE = re.compile(r"<\|[^|<>\s]+\|>|<｜[^｜]+｜>|\[/?[A-Z_]{2,}\]|</?(?:tool_call|tool_response|think|tools)>")

DATA = Path(__file__).resolve().parent / "data"
OURS = DATA / "chat_templates"
OUTPUTS = DATA / "tool_call_outputs" / "templates"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "chat_templates"
SEED = re.compile(SPECIAL_WIDE.pattern + r"|</?seed:[a-z_]+>")
GEMMA4 = re.compile(r'<\|"\|>|<\|[a-z_]+>|<[a-z_]+\|>|<bos>|<eos>')
NEMOTRON = re.compile(SPECIAL_WIDE.pattern + r"|<SPECIAL_\d+>|</?(?:TOOLCALL|AVAILABLE_TOOLS|TOOL_RESPONSE)>")
BEGIN = "<|begin_of_text|>"
DS_BOS, DS_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
# file -> (eos, bos, special-token pattern)
#: Real chat templates (sources in their folders' READMEs; ../shared/data's when present): file ->
#: (eos, bos, special-token pattern).
REAL_TEMPLATES = {
    OURS / "mistral_nemo_2407.jinja": ("</s>", "<s>", SPECIAL_WIDE),
    OURS / "hermes_tool_use.jinja": ("<|im_end|>", BEGIN, SPECIAL_WIDE),
    OURS / "deepseek_r1_distill_qwen.jinja": (DS_EOS, DS_BOS, SPECIAL_WIDE),
    OURS / "qwq_32b.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    OURS / "vllm_internlm2_tool.jinja": ("<|im_end|>", "<s>", SPECIAL_WIDE),
    OURS / "vllm_phi4_mini_tool.jinja": ("<|end|>", None, SPECIAL_WIDE),
    OURS / "vllm_mistral_v03_parallel.jinja": ("</s>", "<s>", SPECIAL_WIDE),
    OURS / "lfm2_5_8b_a1b.jinja": ("<|im_end|>", "<|startoftext|>", SPECIAL_WIDE),
    OURS / "gpt_oss_120b.jinja": ("<|return|>", "<|startoftext|>", SPECIAL_WIDE),
    OURS / "qwen3_coder.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    OURS / "qwen3_5_4b.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    OURS / "deepseek_v3_2.jinja": (DS_EOS, DS_BOS, SPECIAL_WIDE),
    OURS / "minimax_m2.jinja": ("[e~[", None, SPECIAL_WIDE),
    OURS / "seed_oss.jinja": ("<seed:eos>", "<seed:bos>", SEED),
    OURS / "glm_4_6.jinja": ("<|endoftext|>", None, SPECIAL_WIDE),
    OURS / "functionary_medium_v3_1.jinja": ("<|eot_id|>", BEGIN, SPECIAL_WIDE),
    OURS / "functionary_medium_v3_2.jinja": ("<|eot_id|>", BEGIN, SPECIAL_WIDE),
    OURS / "apertus_8b_instruct.jinja": ("</s>", "<s>", SPECIAL_WIDE),
    OURS / "vllm_llama4_pythonic.jinja": ("<|eot|>", BEGIN, SPECIAL_WIDE),
    OURS / "vllm_toolace.jinja": ("<|eot_id|>", BEGIN, SPECIAL_WIDE),
    OURS / "kimi_k2_thinking.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    OURS / "nemotron_nano_v2.jinja": ("<SPECIAL_12>", None, NEMOTRON),
    OURS / "vllm_hunyuan_a13b.jinja": ("<|eos|>", None, SPECIAL_WIDE),
    OUTPUTS / "google-gemma-4-31B-it.jinja": ("<turn|>", "<bos>", GEMMA4),
    OUTPUTS / "upstage-Solar-Open-100B.jinja": ("<|end|>", None, SPECIAL_WIDE),
    OUTPUTS / "moonshotai-Kimi-K2.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    OUTPUTS / "deepseek-ai-DeepSeek-V3.1.jinja": (DS_EOS, DS_BOS, SPECIAL_WIDE),
    OUTPUTS / "vllm-gemma3-pythonic.jinja": ("<end_of_turn>", "<bos>", SPECIAL_WIDE),
    OUTPUTS / "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("</s>", "<s>", SPECIAL_WIDE),
    SHARED / "llama3_1.jinja": ("<|eot_id|>", BEGIN, SPECIAL_WIDE),
    SHARED / "llama3_2.jinja": ("<|eot_id|>", BEGIN, SPECIAL_WIDE),
    SHARED / "qwen2_5.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    SHARED / "qwen3.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    SHARED / "qwen3_instruct_2507.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    SHARED / "smollm2.jinja": ("<|im_end|>", None, SPECIAL_WIDE),
    SHARED / "phi3_5.jinja": ("<|end|>", None, SPECIAL_WIDE),
    SHARED / "deepseekv3.jinja": (DS_EOS, DS_BOS, SPECIAL_WIDE),
}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def tokenizer_with_template(base, template: str, bos: str | None, eos: str, special: re.Pattern = SPECIAL):
    """The embedded tokenizer with the template attached and the template's special tokens added."""
    tok = copy.deepcopy(base)
    specials = sorted(set(special.findall(template)) | {eos} | ({bos} if bos else set()))
    tok.add_special_tokens({"additional_special_tokens": specials}, replace_extra_special_tokens=False)
    tok.chat_template = template
    tok.eos_token = eos
    if bos:
        tok.bos_token = bos
    return tok


def labelled_runs(tokenizer, row):
    """Decoded text of each maximal run of labelled tokens."""
    runs, current = [], []
    for token, label in zip(row["input_ids"], row["labels"]):
        if label != IGNORE_INDEX:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tokenizer.decode(run) for run in runs]
