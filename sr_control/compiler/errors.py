"""Why a valid router config can still fail to compile. Every error names what it is about.

CompileError
  ClusterError      endpoints one cluster cannot hold (names the config field)
  ProtoError        compiled data that does not fit its Envoy type (a template bug)
  DuplicateResource two resources of one type with one name
  Inconsistent      a reference to a resource that was not compiled
"""

from __future__ import annotations


class CompileError(ValueError):
    """A config that passed validation but cannot become Envoy resources."""
