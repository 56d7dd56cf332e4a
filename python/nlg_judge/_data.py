"""Input data for the engine: a JSONL path as it is, or rows (a list of dicts, a pandas
DataFrame) as JSON texts, each with where it came from, so that the library parses and
checks them exactly as it parses a file's lines (errors name the row and field)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any, List, Tuple, Union

Source = Union[str, List[Tuple[str, str]]]


def _plain(value: Any) -> Any:
    """NumPy scalars and arrays as plain Python values."""
    item = getattr(value, "item", None)
    if item is not None and getattr(value, "shape", None) == ():
        return item()
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        return tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _missing(value: Any) -> bool:
    """A missing cell: None, or a NaN (pandas' marker of an empty cell)."""
    if value is None:
        return True
    try:
        return isinstance(value, float) and math.isnan(value) or (
            getattr(value, "shape", None) == () and math.isnan(float(value))
        )
    except (TypeError, ValueError):
        return False


def _clean(row: Mapping) -> dict:
    """Drop missing cells; fold `scores.<key>` columns (pandas.json_normalize) back into
    `scores`."""
    out: dict = {}
    folded: dict = {}
    for key, value in row.items():
        key = str(key)
        if isinstance(value, Mapping):
            value = {str(k): v for k, v in value.items() if not _missing(v)}
        elif _missing(value):
            continue
        if key.startswith("scores.") and "scores" not in row:
            folded[key[len("scores."):]] = value
        else:
            out[key] = value
    if folded:
        out["scores"] = folded
    return out


def _is_dataframe(data: Any) -> bool:
    return hasattr(data, "to_dict") and hasattr(data, "columns") and hasattr(data, "index")


def source(data: Any, name: str = "data") -> Source:
    """What the engine reads: a path (str, os.PathLike) as a path; a pandas DataFrame or a
    sequence of mappings as `(location, json)` rows, counted from 1 as the command line
    counts a file's lines: "row 3 (index 2)" for ``rows[2]``, "row 3 (index label 'c')"
    for a DataFrame's third row."""
    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data)
    if _is_dataframe(data):
        labels = list(data.index)
        records = data.to_dict(orient="records")
        located = zip(
            (f"row {n} (index label {label!r})" for n, label in enumerate(labels, 1)), records
        )
    elif isinstance(data, Mapping):
        raise TypeError(
            f"{name}: expected a list of rows (dicts), a pandas DataFrame or a JSONL path, "
            "got one dict (wrap it in a list)"
        )
    else:
        try:
            rows = list(data)
        except TypeError:
            raise TypeError(
                f"{name}: expected a list of rows (dicts), a pandas DataFrame or a JSONL "
                f"path, got {type(data).__name__}"
            ) from None
        located = ((f"row {i + 1} (index {i})", row) for i, row in enumerate(rows))
    out = []
    for location, row in located:
        if not isinstance(row, Mapping):
            raise ValueError(f"{location}: expected a dict, got {type(row).__name__}")
        try:
            text = json.dumps(_clean(row), default=_plain, allow_nan=False, ensure_ascii=False)
        except ValueError as error:
            raise ValueError(f"{location}: {error}") from None
        except TypeError as error:
            raise ValueError(f"{location}: {error}") from None
        out.append((location, text))
    return out


def jsonl_rows(text: str) -> list:
    """The JSON objects of JSONL text (floats exactly as written)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]
