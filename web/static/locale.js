// Loaded before the vendored uPlot, which calls `new Intl.NumberFormat(navigator.language)` as
// it loads. Under LANG=C or C.UTF-8 (containers, WSL, minimal installs) WebKitGTK reports the
// language "C", Intl throws "RangeError: invalid language tag: C", uPlot never defines itself
// and every chart stays blank. A tag Intl refuses becomes "en-US" here, so the vendored file
// stays as shipped. Chromium maps C to en-US itself; there this does nothing.
"use strict";
(() => {
  try {
    new Intl.NumberFormat(navigator.language);
  } catch (err) {
    // an own property on the navigator object shadows the getter on Navigator.prototype
    Object.defineProperty(navigator, "language", { value: "en-US", configurable: true });
  }
})();
