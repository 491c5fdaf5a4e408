/*
 * Search on a page opened from disk (file://). Chromium refuses to start a
 * Web Worker from a file, and mkdocs-material's search runs in one: here, on
 * file:// only, `Worker` runs the worker's script in a hidden iframe of the
 * page instead, passing the messages across. The `offline` plugin inlines
 * the search index into search/search_index.js, and would add the
 * iframe-worker shim from a CDN unless a script named like this one is
 * listed in `extra.polyfills` (mkdocs.yml): the site loads nothing from the
 * network. Served over HTTP the browser's own Worker is used.
 */
(function () {
  "use strict";
  if (location.protocol !== "file:") return;

  class FrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      const frame = document.createElement("iframe");
      frame.hidden = true;
      (document.body || document.documentElement).appendChild(frame);
      this.frame = frame;
      const scope = frame.contentWindow;
      // The worker's globals: what it posts comes back to this page, cloned
      // into this page's realm as a real worker's messages would be.
      scope.postMessage = (data) => {
        const copy = window.structuredClone(data);
        setTimeout(() => this.deliver(copy), 0);
      };
      scope.importScripts = (...urls) =>
        urls.reduce(
          (done, src) => done.then(() => load(scope.document, src)),
          Promise.resolve()
        );
      this.ready = load(scope.document, String(url)).catch((error) => {
        const event = new ErrorEvent("error", { message: String(error) });
        this.dispatchEvent(event);
        if (this.onerror) this.onerror(event);
      });
    }

    deliver(data) {
      const event = new MessageEvent("message", { data });
      this.dispatchEvent(event);
      if (this.onmessage) this.onmessage(event);
    }

    postMessage(data) {
      this.ready.then(() => {
        const scope = this.frame.contentWindow;
        if (!scope) return; // Terminated.
        const copy = scope.structuredClone(data);
        scope.dispatchEvent(new scope.MessageEvent("message", { data: copy }));
      });
    }

    terminate() {
      this.frame.remove();
    }
  }

  function load(document, src) {
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = src;
      script.onload = () => resolve();
      script.onerror = () => reject(new Error(`could not load ${src}`));
      document.body.appendChild(script);
    });
  }

  // The search worker looks for this name to find its language scripts.
  window.IFrameWorker = FrameWorker;
  window.Worker = FrameWorker;
})();
