"""Lessons: the user's comments on rated answers, grouped, told to the agent at session start.

The engine is pure functions over rows the store reads (``wording`` compares
comments, ``grouping`` groups the ratings behind them, ``book`` adds what the
user decided and flags what must not be told, ``render`` words the text under
the budget, ``trend`` says whether a lesson still happens); ``rewrite`` asks
the user's local model through Ollama to reword one (a suggestion, never saved);
``intents`` is the one door the service, the CLI and the web page change lessons
through, and it writes the files the hook program reads (``hooks/lessonfiles.py``).
"""
