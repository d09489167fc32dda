"""``TopoCurateDataModule``: rollout files in, TopoCurate-selected training data out.

Curation is a pure function of the input files' bytes and the settings (no randomness, ties
broken by task and trial). It runs once, in ``prepare_data`` (which Lightning calls on one
process per node before the others start), and is cached as JSON under a key made of the files'
SHA-256 and the settings; ``setup`` on every DDP rank then reads that cache instead of curating
again. Cache files are written atomically, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

from torch.utils.data import DataLoader

from lightning_agents.atomic import atomic_write_text
from lightning_agents.datamodules.chat import ChatDataModule
from lightning_agents.datamodules.reasoning_turns import split_reasoning_turns as _split_reasoning_turns
from lightning_agents.datamodules.sources import cache_home
from lightning_agents.template_clock import render_chat_template
from lightning_agents.topology.data_checks import curation_warnings
from lightning_agents.topology.pipeline import CurationError
from lightning_agents.topology.report import selection_summary
from lightning_agents.topology.reward_check import reward_check, reward_check_line
from lightning_agents.topology.runs import curate_files
from lightning_agents.topology.selection import SelectionConfig
from lightning_agents.topology.shards import CURATION_VERSION, curation_inputs, file_sha256, inputs_key

log = logging.getLogger(__name__)

__all__ = [
    "CACHE_VERSION",
    "TopoCurateDataModule",
    "conversation_windows",
    "curation_cache_key",
    "default_cache_dir",
    "file_sha256",
]

# The curation code's version (bump it in topology/shards.py): a cache made by other code is not reused.
CACHE_VERSION = CURATION_VERSION


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/lightning_agents/topocurate`` (``~/.cache/...`` when unset)."""
    return cache_home("topocurate")


def curation_cache_key(paths: list[str], settings: dict[str, Any]) -> str:
    """The cache key: file contents (not names, so a moved file still hits) plus settings, made as
    a shard payload's ``inputs_key`` is (:func:`~lightning_agents.topology.shards.inputs_key`; a
    shard first puts ground-truth files whose order changes nothing in one order, so the files in
    another order are another key here, a cache miss, where shards merge)."""
    return inputs_key(paths, settings)


def _conversation_name(index: int, conv: dict) -> str:
    """A curated conversation as a person finds it in the rollout files: its task and trial."""
    if "task_id" in conv:
        return f"curated conversation {index} (task {conv['task_id']!r} trial {conv.get('trial')})"
    return f"curated conversation {index}"


def conversation_windows(
    messages: list[dict],
    length: Any,
    max_length: int,
    policy: Literal["split", "keep_end", "truncate"] = "split",
) -> tuple[list[list[dict]], int]:
    """Fit a long conversation into ``max_length`` tokens by whole user turns.

    The system message (the policy) starts every window; the rest is cut only where a user
    message begins, so every assistant turn keeps the user turn it answers and every tool result
    its call.

    - ``split``: consecutive windows of whole turns; every assistant token is trained on once (a
      turn that alone does not fit is dropped and counted). After the first window, the trained
      turns take at most :data:`SPLIT_TRAINED_SHARE` of the budget and the turns just before them
      fill the rest as context (assistant messages there carry ``weight: 0``), so a call that
      reads an id from an earlier tool result still sees it;
    - ``keep_end``: one window, the longest run of final turns that fits: late recoveries and
      the final answer are what is kept;
    - ``truncate``: the conversation as it is (cut from the right when tokenized), the old
      behaviour, which on a long policy keeps no assistant token at all.

    Args:
        messages: the conversation.
        length: ``length(messages) -> token count`` of a rendered window.
        max_length: the token budget.
        policy: see above.

    Returns:
        ``(windows, dropped turns)``; windows without an assistant message are left out.
    """
    if policy == "truncate" or length(messages) <= max_length:
        return [messages], 0
    head = messages[:1] if messages and messages[0].get("role") == "system" else []
    body = messages[len(head) :]
    starts = [i for i, m in enumerate(body) if m.get("role") == "user" and i > 0]
    bounds = [0, *starts, len(body)]
    turns = [body[a:b] for a, b in zip(bounds, bounds[1:])]

    def useful(window: list[dict]) -> bool:
        return any(m.get("role") == "assistant" for m in window)

    if policy == "keep_end":
        for first in range(len(turns)):
            window = head + [m for turn in turns[first:] for m in turn]
            if length(window) <= max_length:
                return ([window] if useful(window) else []), first
        return [], len(turns)
    windows, dropped, first = [], 0, 0
    while first < len(turns):
        # After the first window, the trained turns take at most a share of the budget so that
        # the turns before them fit as context: a call's arguments (an order id, a line id) come
        # from tool results of earlier turns, and a window without them teaches ids from nowhere.
        budget = max_length if first == 0 else int(max_length * SPLIT_TRAINED_SHARE)
        last, size = first, 0
        while last < len(turns):
            size = length(head + [m for turn in turns[first : last + 1] for m in turn])
            if size > budget:
                break
            last += 1
        if last == first and size <= max_length:
            last = first + 1  # one turn above the share still fits whole (size: its rendering with the head)
        if last == first:  # this turn alone is too long
            dropped += 1
            first += 1
            continue
        trained = [m for turn in turns[first:last] for m in turn]
        context: list[dict] = []
        for turn in reversed(turns[:first]):
            grown = [_as_context(m) for m in turn] + context
            if length(head + grown + trained) > max_length:
                break
            context = grown
        if useful(trained):
            windows.append(head + context + trained)
        first = last
    return windows, dropped


#: Share of ``max_length`` the trained turns of a later ``split`` window may take; the rest holds
#: the turns before them as context (their assistant messages with ``weight: 0``, not trained).
SPLIT_TRAINED_SHARE = 0.5


def _as_context(message: dict) -> dict:
    """An earlier message repeated in a later window: seen, never trained on a second time."""
    return {**message, "weight": 0} if message.get("role") == "assistant" else message


def _as_list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


class TopoCurateDataModule(ChatDataModule):
    """Curates multi-trial rollouts with TopoCurate once and serves the selection.

    In ``sft`` mode the training set is the selected successful trajectories (with the tools and
    the system policy the agent saw), tokenized by
    :class:`~lightning_agents.datamodules.chat.ChatDataModule` with assistant-only labels, for
    ``SFTModule``; conversations longer than ``max_length`` follow ``long_conversations``. In
    ``rl`` mode it is the selected tasks as complete RL records (prompt, policy, user goal and
    turns, tools, environment, ground truth, ``reference``, ``verifier``, scores) for an RL
    module; :meth:`rl_records` returns them too. The selection is logged next to its
    size-matched baselines.

    Args:
        rollouts: rollout file(s) (tau-bench/OpenAI, tau2-bench or BFCL; see
            :func:`~lightning_agents.datamodules.trajectories.load_rollouts`).
        mode: ``sft`` (trajectories for SFT) or ``rl`` (tasks for RL).
        format: rollout format, ``auto`` to detect it per file.
        skip_invalid: skip unreadable rollout records (and invalid SFT conversations) instead of
            stopping at the first; counts are logged and kept in ``state_dict``.
        ground_truth: files of each task's ground truth by id (BFCL possible answers and
            questions, which score BFCL result files; tau2-bench ``tasks.json`` files, which give
            tasks to tau2 results files that carry none).
        tools: JSON file of the OpenAI tool schemas the agent was offered, for rollout files that
            do not record them (tau-bench's).
        verifier: class path of the verifier for RL records of tasks whose file names none; an
            RL task without one is an error.
        bfcl_verifier: what scores BFCL trials from the possible answers and is named in their RL
            records: ``call_match`` or ``execution`` (BFCL's own verdicts; needs the optional
            bfcl-eval package and the question files in ``ground_truth``).
        selection: every setting that changes what is selected (``SelectionConfig``; the same
            group as ``lightning-agents curate --selection.*``).
        workers: processes that build and analyse task graphs in parallel (``0``: in this
            process); the selection is the same for any number.
        long_conversations: what to do with a conversation longer than ``max_length``:
            ``split`` it into windows of whole user turns (the system policy first in each),
            ``keep_end`` (its last turns that fit), or ``truncate`` it from the right (see
            :func:`conversation_windows`).
        cache_dir: folder of the curation cache and of the tokenized rows (one folder for both:
            ``<key>.json`` curations, ``<key>/`` tokenized datasets); ``None`` disables caching
            (then every rank curates in ``setup``); ``"default"`` is
            ``~/.cache/lightning_agents/topocurate``.
        val: validation source(s) for SFT (see ``ChatDataModule``), e.g.
            ``embedded:arithmetic/val``; ``None`` for none.
        tokenizer: tokenizer of the model being trained; ``None`` follows the model (see
            ``ChatDataModule``).
        chat_template: a Jinja chat template file (or text) replacing the tokenizer's own.
        unrendered_system_prompt: what to do with a conversation whose system prompt (the policy the
            agent saw) the chat template does not render (Mistral v0.3 and Nemo): ``refuse`` or
            ``into_first_user`` (see ``ChatDataModule``).
        leading_assistant: what to do with a conversation that opens with the agent's messages
            before any user message (tau2's greeting) where the chat template refuses that (the
            Mistral family): ``refuse`` or ``drop`` them (see ``ChatDataModule``).
        content_format: how a message's text parts reach the chat template, as vLLM's
            ``--chat-template-content-format``: ``auto``, ``string`` or ``openai`` (see
            ``ChatDataModule``).
        split_reasoning_turns: train each assistant turn with reasoning that another message
            follows in a row that ends with it (gpt-oss drops a tool call's analysis once a final
            answer follows, so its agent trajectories are refused otherwise); applied to each
            window of ``long_conversations`` (see ``ChatDataModule``).
        num_proc: tokenizer processes (see ``ChatDataModule``).
        max_length: longest tokenized conversation window.
        batch_size: conversations (sft) or prompts (rl) per batch.
        pack: pack SFT conversations into ``max_length`` rows.
        num_workers: DataLoader workers.
        shuffle: shuffle the training set each epoch.
        seed: shuffle seed (see ``ChatDataModule``); ``None``: the run's seed.
        embedded_size: problems per embedded validation split.
        embedded_styles: styles of embedded validation conversations.
    """

    def __init__(
        self,
        rollouts: str | list[str],
        mode: Literal["sft", "rl"] = "sft",
        format: Literal["auto", "openai", "tau2", "bfcl"] = "auto",
        skip_invalid: bool = False,
        ground_truth: list[str] | None = None,
        tools: str | None = None,
        verifier: str | None = None,
        bfcl_verifier: Literal["call_match", "execution"] = "call_match",
        selection: SelectionConfig = SelectionConfig(),  # noqa: B008 - an argument group, as litgpt's TrainArgs
        workers: int = 0,
        long_conversations: Literal["split", "keep_end", "truncate"] = "split",
        cache_dir: str | None = "default",
        val: str | list[str] | None = None,
        tokenizer: str | None = None,
        chat_template: str | None = None,
        unrendered_system_prompt: Literal["refuse", "into_first_user"] = "refuse",
        leading_assistant: Literal["refuse", "drop"] = "refuse",
        content_format: Literal["auto", "string", "openai"] = "auto",
        split_reasoning_turns: bool = False,
        num_proc: int | None = None,
        max_length: int = 4096,
        batch_size: int = 16,
        pack: bool = False,
        num_workers: int = 0,
        shuffle: bool = True,
        seed: int | None = None,
        embedded_size: int | None = None,
        embedded_styles: list[Literal["direct", "tool", "program"]] = ["tool"],  # noqa: B006 - jsonargparse shows the default
    ) -> None:
        cache = None if cache_dir is None else default_cache_dir() if cache_dir == "default" else Path(cache_dir)
        super().__init__(
            train=None,
            val=val,
            test=None,
            tokenizer=tokenizer,
            max_length=max_length,
            batch_size=batch_size,
            pack=pack,
            skip_invalid=skip_invalid,
            num_workers=num_workers,
            shuffle=shuffle,
            seed=seed,
            embedded_size=embedded_size,
            embedded_styles=embedded_styles,
            chat_template=chat_template,
            unrendered_system_prompt=unrendered_system_prompt,
            leading_assistant=leading_assistant,
            content_format=content_format,
            split_reasoning_turns=split_reasoning_turns,
            num_proc=num_proc,
            cache_dir=None if cache is None else str(cache),
        )
        if mode not in ("sft", "rl"):
            raise CurationError(f"TopoCurateDataModule: mode must be 'sft' or 'rl', got {mode!r}")
        if long_conversations not in ("split", "keep_end", "truncate"):
            raise CurationError(
                f"TopoCurateDataModule: long_conversations must be split, keep_end or truncate, got {long_conversations!r}"
            )
        self.rollout_paths = _as_list(rollouts)
        if not self.rollout_paths:
            raise CurationError("TopoCurateDataModule needs at least one rollout file (`rollouts`)")
        self.mode = mode
        self.format = format
        self.ground_truth = _as_list(ground_truth)
        self.tools = tools
        self.verifier = verifier
        self.bfcl_verifier = bfcl_verifier
        self.selection = SelectionConfig(**selection) if isinstance(selection, dict) else selection
        if workers < 0:
            raise CurationError(f"TopoCurateDataModule: workers must be 0 (in this process) or more, got {workers}")
        self.workers = workers
        self.long_conversations = long_conversations
        self.curation_cache = cache
        self.curated: dict[str, Any] | None = None
        self.cache_hit = False
        self.windows_dropped = 0
        self._restored_selection: dict[str, Any] | None = None

    @property
    def settings(self) -> dict[str, Any]:
        """Every setting that changes what is selected or written (part of the cache key)."""
        return {
            "format": self.format,
            "skip_invalid": self.skip_invalid,
            "verifier": self.verifier,
            "bfcl_verifier": self.bfcl_verifier,
            "selection": self.selection.as_dict(),
        }

    def _compute(self) -> dict[str, Any]:
        inputs = {
            "format": self.format,
            "skip_invalid": self.skip_invalid,
            "ground_truth": self.ground_truth,
            "tools": self.tools,
            "bfcl_verifier": self.bfcl_verifier,
        }
        result, rollouts = curate_files(self.rollout_paths, self.selection, inputs, self.verifier, self.workers)
        payload = {
            "version": CACHE_VERSION,
            "settings": self.settings,
            "inputs": self.rollout_paths,
            "rollouts": len(rollouts),
            "skipped_rollouts": rollouts.skipped,
            "not_run_rollouts": rollouts.not_run,
            "selection": {"sft": [list(k) for k in result.sft], "rl": [s.task_id for s in result.rl]},
            "summary": selection_summary(result),
            "reward_check": reward_check(rollouts, self.selection.success_threshold),
            "sft": result.sft_conversations(),
        }
        if self.mode == "rl":
            payload["rl"] = result.rl_records()
        return payload

    def prepare_data(self) -> None:
        """Curate and tokenize once, filling the caches (Lightning calls this on one process per node, before ``setup``)."""
        if self.curation_cache is None:
            return
        self.curate()
        if self.mode == "sft":
            self.tokenize(self.load_conversations("fit"))
        super().prepare_data()

    def curate(self) -> dict[str, Any]:
        """Run (or read from the cache) the curation; returns the cached payload."""
        if self.curated is not None:
            return self.curated
        files, read = curation_inputs(
            self.rollout_paths,
            self.ground_truth,
            self.tools,
            self.format,
            self.skip_invalid,
            self.verifier,
            self.bfcl_verifier,
        )
        key = curation_cache_key(files, {**read, "selection": self.selection.as_dict(), "mode": self.mode})
        path = self.curation_cache / f"{key}.json" if self.curation_cache is not None else None
        if path is not None and path.is_file():
            try:
                self.curated = json.loads(path.read_text(encoding="utf-8"))
                self.cache_hit = True
            except json.JSONDecodeError:
                log.warning("ignoring unreadable curation cache %s", path)
        if self.curated is None:
            self.curated = self._compute()
            self.cache_hit = False
            if path is not None:
                atomic_write_text(path, json.dumps(self.curated, ensure_ascii=False))
        self.curated["cache_key"] = key
        if self._restored_selection is not None and self._restored_selection != self.curated["selection"]:
            # The checkpoint keeps only the cache key, a hash of all three, so which one changed is not known.
            log.warning(
                "the curated selection differs from the one recorded in the checkpoint: the rollout (or ground-truth, "
                "tools) files, the curation settings, or the curation code (CACHE_VERSION, now %d) changed since",
                CACHE_VERSION,
            )
        n_sft, n_rl = len(self.curated["selection"]["sft"]), len(self.curated["selection"]["rl"])
        log.info(
            "TopoCurate: %d rollouts -> %d SFT trajectories, %d RL tasks%s",
            self.curated["rollouts"],
            n_sft,
            n_rl,
            " (cached)" if self.cache_hit else "",
        )
        for line in _baseline_lines(self.curated.get("summary")):
            log.info("TopoCurate %s", line)
        line, warn = reward_check_line(self.curated.get("reward_check") or {})
        if line:
            log.log(logging.WARNING if warn else logging.INFO, "TopoCurate %s", line)
        for warning in curation_warnings(self.curated["sft"], self.curated.get("rl") or []):
            log.warning("TopoCurate: %s", warning)
        return self.curated

    def load_conversations(self, stage: str) -> list[dict]:
        """The curated SFT conversations for ``fit``; other stages read ``val``/``test`` as ChatDataModule does."""
        if stage != "fit":
            return super().load_conversations(stage)
        conversations = [{"messages": c["messages"], "tools": c.get("tools")} for c in self.curate()["sft"]]
        if not conversations:
            raise CurationError(
                f"TopoCurate selected no successful trajectory from {self.rollout_paths}: check the rewards "
                f"(selection.success_threshold={self.selection.success_threshold}) or use mode='rl'"
            )
        return conversations

    def tokenize(self, conversations: list[dict], stage: str | None = None):
        """Check each conversation (OpenAI format) before tokenizing, then tokenize as ChatDataModule does."""
        from lightning_agents.datamodules.conversations import (
            ConversationError,
            normalize_conversation,
            with_reasoning_keys,
        )

        checked, errors = [], []
        for index, conv in enumerate(conversations):
            try:
                messages, tools = normalize_conversation(conv)
            except ConversationError as exc:
                where = _conversation_name(index, conv)
                if not self.skip_invalid:
                    raise ValueError(f"{where}: {exc}") from None
                errors.append(f"{where}: {exc}")
                continue
            checked.append({"messages": messages, "tools": tools})
        if errors:
            log.warning("skipped %d curated conversation(s) that cannot be trained on: %s", len(errors), errors[:5])
        if self.long_conversations != "truncate":
            windows, dropped_turns = [], 0
            for conv in checked:
                sizes: dict[str, int] = {}

                def rendered(messages: list[dict], tools=conv["tools"], sizes=sizes) -> int:
                    # Remembered per conversation: the candidate windows of one start share most of
                    # their split rows (each row is a prefix), which were rendered again for every
                    # candidate (2.4x the renders of the setting off on tau-bench airline).
                    key = json.dumps(messages, ensure_ascii=False, sort_keys=True)
                    if key not in sizes:
                        # counted as the row renders: Solar-Open reads the reasoning under `reasoning` only
                        encoded = render_chat_template(
                            self.tokenizer, with_reasoning_keys(messages), tools=tools, tokenize=True
                        )
                        sizes[key] = len(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)
                    return sizes[key]

                def length(messages: list[dict], tools=conv["tools"]) -> int:
                    if not self.split_reasoning_turns:
                        return rendered(messages, tools)
                    # the longest row the window is split into: a split turn's row shows reasoning
                    # that the whole window's render drops (Qwen3 before the last user message)
                    rows = _split_reasoning_turns({"messages": messages, "tools": tools})
                    return max(rendered(row["messages"], tools) for row in rows)

                try:
                    parts, dropped = conversation_windows(
                        conv["messages"], length, self.max_length, self.long_conversations
                    )
                except Exception:  # noqa: BLE001 - the template's own error; the labelling below names it
                    # A conversation the template cannot render goes on whole: ChatDataModule's
                    # labelling refuses it (or skips it, with skip_invalid) with the reason.
                    parts, dropped = [conv["messages"]], 0
                windows += [{"messages": part, "tools": conv["tools"]} for part in parts]
                dropped_turns += dropped
            if (stage or getattr(self, "_tokenizing", None)) in (None, "fit"):
                self.windows_dropped = dropped_turns
            if dropped_turns or len(windows) != len(checked):
                log.info(
                    "long_conversations=%s: %d conversation(s) -> %d window(s) of at most %d tokens; %d turn(s) longer than that on their own dropped",
                    self.long_conversations,
                    len(checked),
                    len(windows),
                    self.max_length,
                    dropped_turns,
                )
            checked = windows
        return super().tokenize(checked, stage)

    def _no_rows_reasons(self, split: str) -> tuple[str, Any, list[str]]:
        if split != "fit":
            return super()._no_rows_reasons(split)
        setting, _, why = super()._no_rows_reasons(split)
        if self.windows_dropped:
            why.insert(
                0,
                f"{self.windows_dropped} turn(s) did not fit max_length={self.max_length} together with the system prompt "
                "every window starts with, and were dropped (raise `max_length`)",
            )
        return "rollouts", self.rollout_paths, why

    def rl_records(self) -> list[dict[str, Any]]:
        """The selected RL tasks as complete records, best first (``mode="rl"``)."""
        curated = self.curate()
        if "rl" not in curated:
            raise CurationError("TopoCurateDataModule makes RL records in mode='rl' (they need a verifier per task)")
        return curated["rl"]

    def setup(self, stage: str) -> None:
        """Curate (or read the cache), then tokenize (sft) or keep the prompt records (rl)."""
        if self.mode == "rl":
            if stage == "fit" and "fit" not in self.datasets:
                records = self.rl_records()
                if not records:
                    raise CurationError(
                        f"TopoCurate selected no RL task from {self.rollout_paths}: every task has pass rate 0 or 1 "
                        "(or falls below rl_min_score); RL needs tasks the policy sometimes solves"
                    )
                self.datasets["fit"] = records
            return
        super().setup(stage)

    def train_dataloader(self) -> DataLoader:
        """SFT batches (sft) or lists of prompt records (rl)."""
        if self.mode == "rl":
            return self._rows_loader(self.datasets.get("fit") or [], list, self.shuffle)
        return super().train_dataloader()

    def state_dict(self) -> dict[str, Any]:
        """What was selected (task/trial pairs and RL task ids), the cache key and counts."""
        state = super().state_dict()
        if self.curated is not None:
            state.update(
                {
                    "topocurate_selection": self.curated["selection"],
                    "topocurate_cache_key": self.curated.get("cache_key"),
                    "topocurate_rollouts": self.curated["rollouts"],
                    "topocurate_skipped_rollouts": len(self.curated["skipped_rollouts"]),
                }
            )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Remember the checkpoint's selection so a changed curation is reported at the next
        ``setup``, and shuffle with its seed (see ``ChatDataModule``)."""
        super().load_state_dict(state_dict)
        self._restored_selection = state_dict.get("topocurate_selection")


def _baseline_lines(summary: dict[str, Any] | None) -> list[str]:
    """One log line per selection: TopoCurate's and its size-matched baselines'."""
    if not summary:
        return []
    lines = []
    for name, s in summary["sft"].items():
        lines.append(
            f"SFT {name:<11} n={s['trajectories']:<5} tasks={s['tasks']:<5} tool-error share={s['tool_error_share']:.3f} "
            f"recovery={_mean(s['recovery'])} efficiency={_mean(s['efficiency'])} steps={_mean(s['steps'])}"
        )
    for name, s in summary["rl"].items():
        lines.append(
            f"RL  {name:<11} n={s['tasks']:<5} EBR={_mean(s['error_branch_ratio'])} heterogeneity={_mean(s['heterogeneity'])}"
        )
    return lines


def _mean(distribution: dict[str, Any]) -> str:
    value = distribution.get("mean")
    return "-" if value is None else f"{value:.3f}"
