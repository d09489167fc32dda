#!/usr/bin/env bash
# The prepared GPU check: one script for a lent GPU machine (minutes of device time, so every part
# has a timeout and writes what it measured as soon as it has it). Results go to $OUT (default
# ./gpu_out), one file per part; docs/benchmarks.md "GPU check" records a run.
#
#   bash benchmarks/gpu_check.sh            # on a CUDA machine with this repo's dependencies
#
# Parts: MUZO peak memory / step time / exact restore at Qwen3-1.7B size (muzo_gpu_memory.py);
# full vs LoRA vs QLoRA (bitsandbytes NF4) SFT memory (lora_memory.py); the README's SFT quickstart
# and the MUZO and RSTG quickstarts through the CLI in bf16-mixed on the GPU; RSTG bf16 steps at
# Qwen3-1.7B / 4B size with the HF sampler (rstg_gpu_check.py; the vLLM engines run where vllm is
# installed and are reported as skipped elsewhere).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    $PY -c "import sys, torch, transformers, lightning, peft, bitsandbytes; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'lightning', lightning.__version__, 'peft', peft.__version__, 'bitsandbytes', bitsandbytes.__version__)"
    $PY -c "import vllm; print('vllm', vllm.__version__)" 2>/dev/null || echo "vllm not installed"
} >"$OUT/env.txt" 2>&1

part() {  # part NAME SECONDS COMMAND...: run one part under a timeout, log its output and its time
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "$name rc=$? seconds=$((SECONDS - start))" >>"$OUT/parts.txt"
}

part muzo_gpu_memory 150 $PY benchmarks/muzo_gpu_memory.py --steps 3 --batch 8 --seq 512
part lora_memory 90 $PY benchmarks/lora_memory.py --device cuda --precision bf16-mixed --hidden 2048 --layers 16 \
    --variants full lora qlora
cli() { $PY -m lightning_agents.cli fit "$@" --trainer.accelerator gpu --trainer.precision bf16-mixed; }
part cli_quickstarts 120 bash -c "$(declare -f cli); PY=$PY; cli --config configs/quickstart.yaml && \
    cli --config configs/muzo_quickstart.yaml --trainer.max_steps 150 && \
    cli --config configs/rstg_quickstart.yaml --trainer.max_steps 10"
part rstg_gpu_check 200 $PY benchmarks/rstg_gpu_check.py --size qwen3 --engines hf vllm-colocate --steps 2 \
    --max_new_tokens 256
cat "$OUT/parts.txt"
