"""``python -m nlg_judge``: the ``nlg-judge`` command."""

from ._cli import main

main()
