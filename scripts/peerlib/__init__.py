"""scripts/peer.py's parts: the worker's clock, the model, and the sites it builds."""
