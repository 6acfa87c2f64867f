"""vitref: the reference implementation of the course."""
