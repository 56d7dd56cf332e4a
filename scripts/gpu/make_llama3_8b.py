"""A Llama-3-8B-shaped checkpoint with random weights, made on the machine that runs it
(a GPU machine receives at most 64 MiB, not 16 GB): the real shape (32 layers, hidden
4096, 32 query and 8 key/value heads of 128, MLP 14336, a 128,256-token vocabulary, rope
theta 500,000 with Llama 3's frequency scaling, untied head), bf16 safetensors in 5 GB
shards, with the tokenizer, chat template and comparison prompts of TOKENIZER_DIR (a
folder `prepare.py` wrote: SmolLM2's ids are a subset of the vocabulary, and speed does
not depend on which ids a prompt holds or on the weights' values).

    python scripts/gpu/make_llama3_8b.py OUT_DIR TOKENIZER_DIR [--device cuda] [--tiny]

--tiny: the same construction at 2 layers and hidden 64 (to check the GPU scripts on a CPU).
"""
import argparse
import os
import shutil
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

CARRIED = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "prompts.json",
           "special_tokens_map.json"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("tokenizer_dir")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args()
    shape = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    if a.tiny:
        shape = dict(hidden_size=64, intermediate_size=224, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    tokenizer_config = LlamaConfig.from_pretrained(a.tokenizer_dir)
    config = LlamaConfig(
        vocab_size=128256,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=False,
        bos_token_id=tokenizer_config.bos_token_id,
        eos_token_id=tokenizer_config.eos_token_id,
        torch_dtype="bfloat16",
        **shape,
    )
    config.architectures = ["LlamaForCausalLM"]
    start = time.time()
    torch.manual_seed(0)
    with torch.device(a.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    # Small weights keep the activations of 32 random layers finite in bf16.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
    made = time.time() - start
    model.save_pretrained(a.out, max_shard_size="5GB")
    for name in CARRIED:
        path = os.path.join(a.tokenizer_dir, name)
        if os.path.exists(path):
            shutil.copy(path, a.out)
    params = sum(p.numel() for p in model.parameters())
    print(f"{a.out}: llama, {params / 1e9:.2f}B parameters (bf16), made in {made:.1f} s, "
          f"saved in {time.time() - start - made:.1f} s")


if __name__ == "__main__":
    main()
