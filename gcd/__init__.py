"""l0gc sweeper side: key layouts, the sweeper, its daemon and CLIs, the Spark pipeline."""

__version__ = "0.1.0"

__all__ = ["__version__"]
