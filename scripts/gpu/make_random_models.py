"""Fill the model folders `prepare.py` wrote (config.json + tokenizer) with random weights
of the real shape, saved by transformers as safetensors (f32). Speed does not depend on
the weights' values, and both sides of each comparison read the same file.

Usage: python scripts/gpu/make_random_models.py DIR [DIR...]
"""
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    for folder in sys.argv[1:]:
        config = AutoConfig.from_pretrained(folder)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.save_pretrained(folder)
        params = sum(p.numel() for p in model.parameters())
        print(f"{folder}: {config.model_type}, {params / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
