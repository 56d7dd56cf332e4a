"""Write a random-weight GGUF shaped like Llama-3-8B (or, with `--shape 1.5b`, like
Qwen2.5-1.5B: 28 blocks of 1536, 12 heads, 2 key/value heads, MLP 8960, vocabulary
151936, separate head, under the plain `llama` architecture without biases), quantized like llama.cpp's Q4_K_M
(Q4_K blocks; Q6_K for the output head and, as Q4_K_M does, for attn_v and ffn_down of
half the blocks), to measure nlg-judge's memory at real sizes without the real weights.

The architecture is plain `llama` with the default rope (the llama3 rope scaling is not
needed to measure memory or speed). The tokenizer is a byte-level BPE over the 256 byte symbols (one merge),
padded with unreachable filler tokens to the vocabulary size. Block bytes are random with
small, finite scales, generated tensor by tensor and streamed to the file (peak memory
~0.3 GB). The 8B file is ~4.9 GB, the 1.5B one ~1.1 GB: never commit them. The 8B output
is byte-identical to this script's before it took `--shape`.

    /work/venv/bin/python benches/memory/make_llama3_8b_gguf.py /work/scratch/cards/llama3-8b-q4km.gguf
    /work/venv/bin/python benches/memory/make_llama3_8b_gguf.py --shape 1.5b /work/scratch/cost/qwen1.5b-shape-q4km.gguf
"""

import argparse

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

# (hidden, layers, heads, key/value heads, MLP, vocabulary, context, rope base, norm eps, name)
SHAPES = {
    "8b": (4096, 32, 32, 8, 14336, 128256, 8192, 500000.0, 1e-5, "Llama-3-8B"),
    "1.5b": (1536, 28, 12, 2, 8960, 151936, 32768, 1000000.0, 1e-6, "Qwen2.5-1.5B"),
}
Q4_K, Q6_K = GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K
# Bytes per 256-element block.
BLOCK_BYTES = {Q4_K: 144, Q6_K: 210}

rng = np.random.default_rng(0)


def f16_bytes(value: float, count: int) -> np.ndarray:
    return np.full(count, value, dtype=np.float16).view(np.uint8).reshape(count, 2)


def blocks(rows: int, cols: int, kind: GGMLQuantizationType) -> np.ndarray:
    """Random blocks of `kind` for a rows x cols matrix, as uint8 (rows, bytes per row)."""
    n = rows * cols // 256
    data = rng.integers(0, 256, size=(n, BLOCK_BYTES[kind]), dtype=np.uint8)
    if kind == Q4_K:  # d, dmin (f16), scales[12], qs[128]
        data[:, 0:2] = f16_bytes(0.002, n)
        data[:, 2:4] = f16_bytes(0.001, n)
    else:  # Q6_K: ql[128], qh[64], scales[16] (int8), d (f16)
        data[:, 192:208] = rng.integers(1, 32, size=(n, 16), dtype=np.uint8)
        data[:, 208:210] = f16_bytes(0.0005, n)
    return data.reshape(rows, cols // 256 * BLOCK_BYTES[kind])


def byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for _, c in sorted(zip(printable, codes))]


def main(path: str, shape: str) -> None:
    HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CONTEXT, ROPE_BASE, EPS, NAME = SHAPES[shape]
    HEAD_DIM = HIDDEN // HEADS
    writer = GGUFWriter(path, "llama")
    writer.add_name(f"random {NAME} shape (nlg-judge memory bench)")
    writer.add_block_count(LAYERS)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(EPS)
    writer.add_vocab_size(VOCAB)
    writer.add_file_type(15)  # MOSTLY_Q4_K_M

    symbols = byte_symbols()
    # One merge (two spaces), so the BPE model has merges to read.
    tokens = symbols + ["\u0120\u0120"]
    tokens += [f"<|filler_{i}|>" for i in range(VOCAB - len(tokens) - 2)]
    tokens += ["<|begin_of_text|>", "<|eot_id|>"]
    types = [1] * (VOCAB - 2) + [3, 3]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["\u0120 \u0120"])
    writer.add_bos_token_id(VOCAB - 2)
    writer.add_eos_token_id(VOCAB - 1)

    # (name, rows, cols, kind); norms are f32 vectors.
    plan = [("token_embd.weight", VOCAB, HIDDEN, Q4_K)]
    for i in range(LAYERS):
        heavy = Q6_K if i % 2 == 0 else Q4_K  # Q4_K_M: half the layers' v/down at Q6_K
        plan += [
            (f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN, Q4_K),
            (f"blk.{i}.attn_k.weight", KV_HEADS * HEAD_DIM, HIDDEN, Q4_K),
            (f"blk.{i}.attn_v.weight", KV_HEADS * HEAD_DIM, HIDDEN, heavy),
            (f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN, Q4_K),
            (f"blk.{i}.ffn_gate.weight", FFN, HIDDEN, Q4_K),
            (f"blk.{i}.ffn_up.weight", FFN, HIDDEN, Q4_K),
            (f"blk.{i}.ffn_down.weight", HIDDEN, FFN, heavy),
            (f"blk.{i}.attn_norm.weight", 0, HIDDEN, None),
            (f"blk.{i}.ffn_norm.weight", 0, HIDDEN, None),
        ]
    plan += [("output_norm.weight", 0, HIDDEN, None), ("output.weight", VOCAB, HIDDEN, Q6_K)]

    for name, rows, cols, kind in plan:
        if kind is None:
            writer.add_tensor_info(name, (cols,), np.dtype(np.float32), cols * 4)
        else:
            nbytes = rows * cols // 256 * BLOCK_BYTES[kind]
            writer.add_tensor_info(
                name, (rows, cols // 256 * BLOCK_BYTES[kind]), np.dtype(np.uint8), nbytes, kind
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, rows, cols, kind in plan:
        if kind is None:
            writer.write_tensor_data(np.ones(cols, dtype=np.float32))
        else:
            writer.write_tensor_data(blocks(rows, cols, kind))
    writer.close()
    print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    args = parser.parse_args()
    main(args.path, args.shape)
