"""The ``anfitrion`` command line: thin noun-verb groups over library functions."""
