"""The desktop session: notifications, idle time, autostart, D-Bus, opening files.

The tray icon, a face that the runtime never imports, is ``app/tray/``.
"""
