"""Agent frameworks behind the gate: each module wraps one framework's tools and approvals.

Each module imports its framework itself (an optional extra); importing this package imports
none of them.
"""
