"""A GGUF's metadata (architecture keys, tokenizer, chat template) without its tensors:
what `make_quantized_gguf.py` needs from a real file that is too large to travel.

Usage: python scripts/gpu/gguf_metadata.py IN.gguf OUT.gguf
"""
import sys

import gguf


def copy_metadata(reader, writer, overrides=None):
    """Every key of `reader` into `writer` (the architecture is the writer's own), with
    the values in `overrides` in place of the stored ones."""
    overrides = overrides or {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, overrides.get(key, field.contents()), vtype, sub_type=sub)


def main():
    source, target = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(target, arch)
    copy_metadata(reader, writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{target}: {len(reader.fields)} keys of {source}")


if __name__ == "__main__":
    main()
