"""Compatibility name: `java_string_hashcode` lives in `coordinator.keys` (issue 23)."""

from coordinator.keys import java_string_hashcode

__all__ = ["java_string_hashcode"]
