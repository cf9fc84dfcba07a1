"""The agent loop's parts: tools and their schemas, the journal."""
