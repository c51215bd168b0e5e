"""The settings window and setup wizard: a Flask app (``app.create_app``) over the Service.

One blueprint per screen (wizard, dashboard, ratings, adapters, settings);
``security`` guards every request, ``server`` serves it on 127.0.0.1 and hands
out one-time launch URLs, ``window`` shows it with pywebview in its own process.
"""
