"""``python -m distforest``: the command line."""

from distforest.cli.main import main

if __name__ == "__main__":
    main()
