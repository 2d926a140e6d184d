"""``python -m populace.cli``: the ``populace`` command, for environments without its script
(and for the tests, which run it with the interpreter under test)."""

from populace.cli import main

if __name__ == "__main__":
    main()
