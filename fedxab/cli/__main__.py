"""``python -m fedxab.cli``: the ``fedxab`` command."""

from fedxab.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
