"""The LLM in the loop: the cascade for 'not sure' answers, and its answers kept as teacher labels."""
