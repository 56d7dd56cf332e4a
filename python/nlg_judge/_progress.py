"""Progress of long work: drawn with tqdm when it is installed (tqdm.auto: a widget in
notebooks, a bar in terminals), silent otherwise, or given to the caller's callback.

The engine reports tasks ("240 comparisons"): `begin(total, unit)`, `advance(steps)`,
`end()`, and notes (`note(text)`). `progress=` takes:

- ``None`` (default) or ``True``: tqdm if installed, else nothing;
- ``False``: nothing;
- a callable ``f(done, total, unit)``: called when a task begins and after every step;
- an object with ``begin``, ``advance``, ``end`` and ``note`` methods: used as it is.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

_log = logging.getLogger("nlg_judge")


class _Tqdm:
    def __init__(self, tqdm: Any) -> None:
        self._tqdm = tqdm
        self._bar = None

    def begin(self, total: int, unit: str) -> None:
        self.end()
        self._bar = self._tqdm(total=total, unit=" " + unit.split(" ")[0], desc="nlg-judge")

    def advance(self, steps: int) -> None:
        if self._bar is not None:
            self._bar.update(steps)

    def end(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def note(self, text: str) -> None:
        self._tqdm.write(text)


class _Callback:
    def __init__(self, callback: Callable[[int, int, str], Any]) -> None:
        self._callback = callback
        self._done = 0
        self._total = 0
        self._unit = ""

    def begin(self, total: int, unit: str) -> None:
        self._done, self._total, self._unit = 0, total, unit
        self._callback(0, total, unit)

    def advance(self, steps: int) -> None:
        self._done += steps
        self._callback(self._done, self._total, self._unit)

    def end(self) -> None:
        pass

    def note(self, text: str) -> None:
        _log.info("%s", text)


class _Silent:
    def begin(self, total: int, unit: str) -> None:
        pass

    def advance(self, steps: int) -> None:
        pass

    def end(self) -> None:
        pass

    def note(self, text: str) -> None:
        _log.info("%s", text)


def sink(progress: Any) -> Optional[Any]:
    """The sink the engine reports to for `progress=` (see the module's doc)."""
    if progress is False:
        return _Silent()
    if progress is None or progress is True:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return _Silent()
        return _Tqdm(tqdm)
    if all(hasattr(progress, m) for m in ("begin", "advance", "end", "note")):
        return progress
    if callable(progress):
        return _Callback(progress)
    raise TypeError(
        "progress: expected None, True, False, a callable f(done, total, unit) or an object "
        f"with begin/advance/end/note methods, got {type(progress).__name__}"
    )
