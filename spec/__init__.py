"""The invariant registry: one Markdown file per area (see spec/README.md for the format).

The link from code back to an invariant is ``reference_impl.spec_links.implements``.
"""
