"""What a careful operator declares for each AgentDojo suite: effects, trust, rules.

Each module defines ``OPERATOR``, an :class:`~operator_policies._base.SuiteOperator`.
"""
