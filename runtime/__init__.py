"""bitforge runtimes: GPU (compressed LLM formats) and host runtime for deployed devices."""
