"""Real model configurations (Hugging Face) translated to the theory's parameters."""
