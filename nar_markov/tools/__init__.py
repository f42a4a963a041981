"""Tools on finished runs: replay."""
