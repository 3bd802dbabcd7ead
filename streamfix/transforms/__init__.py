"""The chain's transformers, one concern per module (see ``chain.py``)."""
