"""``python -m sktune`` is the ``sktune`` command."""

from sktune.cli.app import main

main()
