"""A llama GGUF of a random-weight transformers checkpoint (`make_random_models.py`),
quantized as the real SmolLM2-135M-Instruct Q4_1 file is (token embeddings Q8_0, the
blocks' matrices Q4_1, norms f32), with the real file's metadata and tokenizer (read from
`gguf_metadata.py`'s output): the full-size quantized model, for the GPU's quantized
kernels, where the real file cannot travel.

Usage: python scripts/gpu/make_quantized_gguf.py HF_DIR METADATA.gguf OUT.gguf [--f32]
(--f32: every tensor f32, to check the conversion itself against transformers)
"""
import os
import sys

import gguf
import numpy as np
from gguf import quants
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_metadata import copy_metadata  # noqa: E402

Q = gguf.GGMLQuantizationType


def permute(weight, heads):
    """llama.cpp's row order for the query and key projections (interleaved rotation)."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def main():
    hf_dir, metadata, target = sys.argv[1:4]
    unquantized = "--f32" in sys.argv[4:]
    reader = gguf.GGUFReader(metadata)
    arch = reader.fields["general.architecture"].contents()
    assert arch == "llama", arch
    heads = reader.fields["llama.attention.head_count"].contents()
    kv_heads = reader.fields["llama.attention.head_count_kv"].contents()
    state = load_file(f"{hf_dir}/model.safetensors")
    blocks = len({name.split(".")[2] for name in state if name.startswith("model.layers.")})
    writer = gguf.GGUFWriter(target, arch)
    copy_metadata(reader, writer, {"llama.block_count": blocks})

    def add(name, values, kind):
        values = np.ascontiguousarray(values, dtype=np.float32)
        if kind == Q.F32 or unquantized:
            writer.add_tensor(name, values)
        else:
            writer.add_tensor(name, quants.quantize(values, kind), raw_dtype=kind)

    add("token_embd.weight", state["model.embed_tokens.weight"], Q.Q8_0)
    add("output_norm.weight", state["model.norm.weight"], Q.F32)
    for i in range(blocks):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        add(b + "attn_norm.weight", state[p + "input_layernorm.weight"], Q.F32)
        add(b + "ffn_norm.weight", state[p + "post_attention_layernorm.weight"], Q.F32)
        add(b + "attn_q.weight", permute(state[p + "self_attn.q_proj.weight"], heads), Q.Q4_1)
        add(b + "attn_k.weight", permute(state[p + "self_attn.k_proj.weight"], kv_heads), Q.Q4_1)
        for ours, theirs in [("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                             ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                             ("ffn_down", "mlp.down_proj")]:
            add(f"{b}{ours}.weight", state[f"{p}{theirs}.weight"], Q.Q4_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{target}: {blocks} blocks, Q8_0 embeddings, Q4_1 matrices")


if __name__ == "__main__":
    main()
