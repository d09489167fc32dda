"""A vLLM generation engine, colocated with the training model on the same GPU (optional).

Used only when ``vllm`` is importable; nothing else in the package imports vLLM. It returns the same
:class:`~lightning_agents.rollout.GenerationOutput` as the HF engine (left-padded prompts, EOS-masked
completions, sampling log-probs), so RL code is engine-agnostic. Entropies are not returned by vLLM
(``entropies`` is ``None``); the RL module then ranks tokens by ``|A_opd|`` alone.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from lightning_agents.rollout.hf_engine import GenerationOutput, HFGenerationEngine, SamplingConfig

__all__ = ["VLLMGenerationEngine", "vllm_available"]


def vllm_available() -> bool:
    """Whether ``vllm`` can be imported here."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


class VLLMGenerationEngine:
    """Samples with a colocated ``vllm.LLM`` and pushes the trainer's weights into it on demand.

    Args:
        model_name_or_path: model vLLM loads (the student's path or hub id).
        tokenizer: the student's tokenizer (its pad/eos ids shape the output).
        gpu_memory_utilization: fraction of GPU memory vLLM may take (the trainer needs the rest).
        dtype: vLLM weight dtype.
        llm_kwargs: further ``vllm.LLM`` arguments.
    """

    def __init__(self, model_name_or_path: str, tokenizer, gpu_memory_utilization: float = 0.3,
                 dtype: str = "bfloat16", llm_kwargs: dict[str, Any] | None = None) -> None:
        if not vllm_available():
            raise ImportError("VLLMGenerationEngine needs vllm (pip install vllm on a CUDA machine); "
                              "use HFGenerationEngine otherwise")
        from vllm import LLM

        self.tokenizer = tokenizer
        self.llm = LLM(model=model_name_or_path, gpu_memory_utilization=gpu_memory_utilization, dtype=dtype,
                       enable_prefix_caching=True, **dict(llm_kwargs or {}))
        # Rendering and left padding are shared with the HF engine so both produce identical prompts.
        self._hf = HFGenerationEngine(model=None, tokenizer=tokenizer)

    def render(self, prompt, tools=None) -> str:
        """The prompt text (chat template applied to message lists)."""
        return self._hf.render(prompt, tools)

    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the training model's current weights into the vLLM model (call before sampling)."""
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.model.load_weights(((name, p.detach()) for name, p in model.state_dict().items()))

    def generate(self, prompts: Sequence, num_samples: int = 1, sampling: SamplingConfig | None = None,
                 tools=None) -> GenerationOutput:
        """Sample ``num_samples`` completions per prompt; same output layout as the HF engine."""
        from vllm import SamplingParams

        sampling = sampling or SamplingConfig()
        params = SamplingParams(n=num_samples, max_tokens=sampling.max_new_tokens,
                                temperature=sampling.temperature if sampling.do_sample else 0.0,
                                top_p=sampling.top_p, top_k=sampling.top_k or -1, logprobs=0)
        prompt_ids, prompt_mask = self._hf.encode_prompts(prompts, tools)
        token_prompts = [{"prompt_token_ids": row[mask.bool()].tolist()} for row, mask in zip(prompt_ids, prompt_mask)]
        results = self.llm.generate(token_prompts, params, use_tqdm=False)
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        seqs, lps = [], []
        for res in results:
            for comp in res.outputs:
                ids = list(comp.token_ids)
                seqs.append(ids)
                lps.append([next(iter(step.values())).logprob if step else 0.0 for step in (comp.logprobs or [])])
        width = max(1, max(len(s) for s in seqs))
        n = len(seqs)
        completion = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        logprobs = torch.zeros((n, width))
        for r, (ids, lp) in enumerate(zip(seqs, lps)):
            if ids:
                completion[r, :len(ids)] = torch.tensor(ids)
                mask[r, :len(ids)] = 1
                logprobs[r, :len(lp)] = torch.tensor(lp[:len(ids)])
        truncated = torch.tensor([eos not in s for s in seqs])
        texts = self.tokenizer.batch_decode(completion, skip_special_tokens=True)
        return GenerationOutput(
            prompt_ids=prompt_ids.repeat_interleave(num_samples, dim=0),
            prompt_mask=prompt_mask.repeat_interleave(num_samples, dim=0),
            completion_ids=completion, completion_mask=mask, logprobs=logprobs * mask, texts=texts,
            truncated=truncated, entropies=None,
        )
