"""The settings web app: Flask app factory, one blueprint per screen, pywebview launcher.

Empty until the settings issue; the CLI and service in rltray.app are what it will call.
"""
