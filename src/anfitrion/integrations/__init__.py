"""Agent frameworks behind anfitrion's gate; each module imports its framework, this one none."""
