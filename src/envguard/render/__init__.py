"""Turn models and results into text: rich tables, JSON, Markdown, GitHub annotations."""
