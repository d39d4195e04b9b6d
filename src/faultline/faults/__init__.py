"""Fault rules, the shipped fault types and the defenses: pure logic over envelopes, no transport.

`MASFIRE_FAULTS` names the 15 MAS-FIRE fault types; `fault_types()` holds every registered
type (those and the structured-reflection tool-call perturbations), each with its `mechanism`.
"""

from faultline.core import CONTROL_EPISODE, OPERATOR
from faultline.faults._defenses import (
    DEFENSE_ORDER,
    DEFENSES,
    Defense,
    DefenseInterceptor,
    DefenseSettings,
    Rejection,
    build_defenses,
    check_defenses,
    screen,
    settings_from,
)
from faultline.faults._interceptor import FaultInterceptor, apply_fault, context_injector, fault_event
from faultline.faults._prompt import INSTRUCTION, SYSTEM_ADDENDUM
from faultline.faults._registry import (
    MASFIRE_FAULTS,
    MECHANISMS,
    EpisodeCatalog,
    FaultRule,
    FaultSite,
    FaultType,
    Injector,
    fault_type,
    fault_types,
    register_fault,
    why_not_on,
)
from faultline.faults._rules import (
    FAULTS_CONTROL,
    RuleSet,
    add_rule_control,
    check_agents,
    clear_rules_control,
    remove_rule_control,
)
from faultline.faults._semantic import INJECTOR_ROLE, TEMPLATES, simulate
from faultline.faults._structural import COMPRESSED
from faultline.faults._types import MAX_COPIES

__all__ = [
    "COMPRESSED",
    "CONTROL_EPISODE",
    "DEFENSES",
    "DEFENSE_ORDER",
    "Defense",
    "DefenseInterceptor",
    "DefenseSettings",
    "EpisodeCatalog",
    "FAULTS_CONTROL",
    "FaultInterceptor",
    "FaultRule",
    "FaultSite",
    "FaultType",
    "INJECTOR_ROLE",
    "INSTRUCTION",
    "Injector",
    "MASFIRE_FAULTS",
    "MAX_COPIES",
    "MECHANISMS",
    "OPERATOR",
    "Rejection",
    "RuleSet",
    "SYSTEM_ADDENDUM",
    "TEMPLATES",
    "add_rule_control",
    "apply_fault",
    "fault_event",
    "build_defenses",
    "check_agents",
    "check_defenses",
    "clear_rules_control",
    "context_injector",
    "fault_type",
    "fault_types",
    "why_not_on",
    "register_fault",
    "remove_rule_control",
    "screen",
    "settings_from",
    "simulate",
]
