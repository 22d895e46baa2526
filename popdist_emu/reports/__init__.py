"""A single run's reports: summary.json, trace.json, the printed summary and report.html."""

from popdist_emu.reports._html import REPORT_FILE as REPORT_FILE
from popdist_emu.reports._html import page as html_page
from popdist_emu.reports._html import table as html_table
from popdist_emu.reports._planner import available_memory_summary as available_memory_summary
from popdist_emu.reports._planner import print_planner_warnings as print_planner_warnings
from popdist_emu.reports._run_info import RunInfo as RunInfo
from popdist_emu.reports._run_info import run_info as run_info
from popdist_emu.reports._summary import SUMMARY_FILE as SUMMARY_FILE
from popdist_emu.reports._summary import TRACE_FILE as TRACE_FILE
from popdist_emu.reports._summary import chrome_trace as chrome_trace
from popdist_emu.reports._summary import format_summary as format_summary
from popdist_emu.reports._summary import summary as summary
from popdist_emu.reports._summary import write_reports as write_reports

__all__ = [
    "REPORT_FILE",
    "SUMMARY_FILE",
    "TRACE_FILE",
    "RunInfo",
    "available_memory_summary",
    "chrome_trace",
    "format_summary",
    "html_page",
    "html_table",
    "print_planner_warnings",
    "run_info",
    "summary",
    "write_reports",
]
