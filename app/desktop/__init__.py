"""The desktop session: the tray, notifications, idle time, autostart, D-Bus, opening files."""
