"""The invariant registry: one Markdown file per area (see spec/README.md for the format)."""
