"""A GGUF's metadata (architecture keys, tokenizer, chat template) without its tensors:
what `make_quantized_gguf.py` needs from a real file that is too large to travel.

Usage: python scripts/gpu/gguf_metadata.py IN.gguf OUT.gguf
"""
import sys

import gguf


def main():
    source, target = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(target, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{target}: {len(reader.fields)} keys of {source}")


if __name__ == "__main__":
    main()
