"""A GGUF model as a transformers checkpoint directory (f32 safetensors, tokenizer, chat
template), for engines that load only checkpoints (vLLM's CPU build). Dequantised by
transformers' own GGUF reader, so the weights are the GGUF's exactly as f32; the same
directory then serves as `nlg-judge --model DIR`, and both sides compute on equal weights.

    python gguf_checkpoint.py MODEL.gguf OUT_DIR
"""

import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    gguf, out = sys.argv[1], sys.argv[2]
    folder, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized and will not save it: copy the
    # dequantised tensors into a plain model of the same configuration.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"{out}: {config.architectures[0]}, {sum(p.numel() for p in plain.parameters())} parameters")


if __name__ == "__main__":
    main()
