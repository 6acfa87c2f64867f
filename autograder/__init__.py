"""autograder: checks student answers against vitref."""
