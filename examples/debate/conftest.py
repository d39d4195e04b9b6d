"""This folder on the import path, as faultline's default `[plugins] path` puts it for `faultline run`."""

from pathlib import Path

from faultline.agent import use_plugin_path

use_plugin_path([Path(__file__).parent])
