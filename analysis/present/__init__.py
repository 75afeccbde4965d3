"""Tables and figures (matplotlib loads on the first plot)."""
