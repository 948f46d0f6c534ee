// The page of `ostm-viewer watch` (docs/watch.md). Everything it draws comes from the
// viewer: each frame's SVG is the picture `ostm-viewer render` writes for that world, put
// into the page as it is (picture.js changes only what differs from the frame before). The page asks for one frame at a time (live: `ready` at a
// display refresh, the frame drawn at the next; replay: `show` a step), so a slow tab gets
// fewer frames and never more than it can draw.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  // The page's state, readable from the console (and by the tests).
  const st = {
    mode: "",
    hello: null,
    frame: null,
    pinned: null,
    hover: null,
    drift: null,
    ended: null,
    // Live: attached (a world came), the reason while reconnecting, and the verdict the
    // badge shows ({state, why}).
    attached: false,
    lost: null,
    verdict: { state: "connecting", why: "" },
    errors: [],
    // Replay.
    playing: false,
    speed: 60,
    carry: 0,
    lastTick: 0,
    pending: false,
    askedStep: 0,
    wanted: null,
    // Live: the frame received and not drawn yet, and whether a ready is in flight.
    inbox: null,
    asked: true,
    // Replay: when the last show was sent, and how long until its frame was in the page (ms).
    askedAt: 0,
    shownIn: null,
    // Frames drawn, their times in the last second, and the milliseconds spent putting
    // their pictures into the page (picture.js; the browser's styling, layout and paint
    // come after).
    drawn: 0,
    setMs: 0,
    times: [],
    fps: 0,
  };
  window.ostm = st;
  const picture = new window.OstmPicture($("picture"));
  st.picture = picture;

  const token = new URLSearchParams(location.search).get("token");
  const ws = new WebSocket(
    `ws://${location.host}/ws` + (token ? `?token=${encodeURIComponent(token)}` : ""),
  );
  const send = (m) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(m));
  };
  const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const bytes = (n) => {
    if (n === null || n === undefined) return "–";
    if (n < 1024) return `${n} B`;
    if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
    return `${(n / (1 << 20)).toFixed(1)} MiB`;
  };
  const CHECK_TEXT = {
    verified: "verified frame",
    snapshot: "host snapshot (not yet verified)",
    drift: "not verified: drift",
    matches_row: "matches the hash row",
    differs_from_row: "differs from the hash row",
    no_row: "no hash row to check",
  };

  ws.onopen = () => { document.body.dataset.state = "open"; $("conn").textContent = ""; };
  ws.onclose = () => {
    document.body.dataset.state = "closed";
    $("conn").textContent = "disconnected from the viewer";
    st.playing = false;
  };
  ws.onmessage = (e) => {
    let m;
    try { m = JSON.parse(e.data); } catch (_) { return; }
    const h = handlers[m.type];
    if (h) h(m);
  };

  const handlers = {
    hello(m) {
      st.hello = m;
      st.mode = m.mode;
      document.body.dataset.mode = m.mode;
      $("name").textContent = m.name;
      document.title = `${m.name} · ostm watch`;
      if (m.slots !== null && m.slots !== undefined) $("slots").textContent = m.slots;
      if (m.ghost) {
        $("ghost-label").hidden = false;
        $("ghost-name").textContent = m.ghost;
      }
      if (m.ghost_note) {
        $("ghost-note").hidden = false;
        $("ghost-note").textContent = m.ghost_note;
      }
      if (m.mode === "replay") {
        for (const el of [$("timeline"), $("step-input")]) {
          el.min = m.first_step;
          el.max = m.last_step;
        }
        $("index-item").textContent = m.index;
      }
    },

    frame(m) {
      if (st.mode === "live") {
        if (!st.attached) {
          st.attached = true;
          showVerdict();
        }
        // Drawn at the next display refresh; the next is asked for then.
        st.inbox = m;
        st.asked = false;
        wantRefresh();
      } else {
        draw(m);
        st.pending = false;
        st.shownIn = performance.now() - st.askedAt;
        if (st.wanted !== null && st.wanted !== m.step) {
          const w = st.wanted;
          st.wanted = null;
          show(w);
        }
      }
    },

    status(m) {
      st.lost = m.lost || null;
      if (m.step !== null && m.step !== undefined) st.attached = true;
      showVerdict();
      $("host-step").textContent = num(m.host_step);
      $("verified").textContent = num(m.verified);
      $("lag").textContent = num(m.lag);
      if (!st.ended) $("rate").textContent = num(Math.round(m.rate));
      $("resyncs").textContent = num(m.resyncs);
      $("gaps-item").hidden = !m.gaps;
      $("gaps").textContent = num(m.gaps);
      $("lost-item").hidden = !m.lost;
      if (m.lost) $("lost").textContent = m.lost;
      $("yield-item").hidden = !m.frame_gap_ms;
      if (m.frame_gap_ms) $("frame-gap").textContent = num(m.frame_gap_ms);
      $("recording-item").hidden = !m.recording;
      if (m.recording) {
        $("recording").textContent = `${m.recording.path} (${bytes(m.recording.bytes)})`;
      }
      if (m.strip) drawStrip(m.strip);
    },

    drift(m) {
      st.drift = m;
      const r = m.report;
      $("drift").hidden = false;
      $("drift-summary").textContent = r.summary;
      $("drift-step").textContent = r.step;
      $("drift-body").textContent = r.body === null ? "–" : r.body;
      $("drift-field").textContent = r.field === null ? "–" : r.field;
      $("drift-host").textContent = r.host === null ? "–" : r.host;
      $("drift-viewer").textContent = r.viewer === null ? "–" : r.viewer;
      $("drift-stages").textContent = r.stages;
      $("drift-note").textContent = r.note || "";
      const names = {
        last_verified: `last verified (step ${r.step - 1})`,
        viewer: `viewer's world at ${r.step}`,
        host: `host's world at ${r.step}`,
      };
      const box = $("drift-worlds");
      box.textContent = "";
      for (const w of m.worlds) {
        const b = document.createElement("button");
        b.textContent = names[w] || w;
        b.dataset.world = w;
        b.onclick = () => send({ type: "world", world: w });
        box.appendChild(b);
      }
      showVerdict();
      if (st.frame) showCheck(st.frame);
    },

    end(m) {
      st.ended = m;
      showEnded();
      $("end").hidden = false;
      $("end-message").textContent = m.message;
      document.body.dataset.state = `ended-${m.verdict}`;
      showVerdict();
      if (st.frame) showCheck(st.frame);
    },

    error(m) {
      st.errors.push(m.message);
      if (st.errors.length > 5) st.errors.shift();
      $("errors-section").hidden = false;
      const ul = $("errors");
      ul.textContent = "";
      for (const e of st.errors) {
        const li = document.createElement("li");
        li.textContent = e;
        ul.appendChild(li);
      }
    },
  };

  // Live: a frame that comes asks for the next display refresh; at it, draw the frame and
  // ask for the next (one request in flight), so the viewer draws the next frame while the
  // browser paints this one: at most one frame per refresh. No frame, no refresh asked
  // for, so a page waiting for frames costs the browser nothing at each refresh.
  let refreshing = false;
  function wantRefresh() {
    if (refreshing) return;
    refreshing = true;
    requestAnimationFrame(refresh);
  }
  function refresh() {
    refreshing = false;
    if (st.inbox) {
      const m = st.inbox;
      st.inbox = null;
      draw(m);
    }
    if (!st.asked && !st.ended && ws.readyState === WebSocket.OPEN) {
      st.asked = true;
      send({ type: "ready" });
    }
  }

  // Once the session has ended nothing moves: no rates, but that it ended and the totals.
  function showEnded() {
    $("rate-item").textContent = `ended · ${num(st.ended.verified)} steps verified`;
    $("fps-item").textContent = `page: ${num(st.drawn)} frames drawn`;
  }

  // The page's frame rate counts the frames of the last second, also when none come.
  setInterval(() => {
    if (st.ended) return;
    const now = performance.now();
    while (st.times.length && st.times[0] < now - 1000) st.times.shift();
    if (st.fps !== st.times.length) {
      st.fps = st.times.length;
      $("fps").textContent = st.fps;
    }
  }, 500);

  // The badge: the session's verdict, apart from what proves the frame shown. Verifying
  // (attached and connected), reconnecting (and why), drift (and where), ended (and why:
  // the session's last line); connecting before the attach.
  function showVerdict() {
    if (st.mode !== "live") return;
    let state = "connecting";
    let why = "";
    if (st.ended) {
      state = { drift: "drift", ok: "ended", incomplete: "incomplete" }[st.ended.verdict] || "failed";
      why = String(st.ended.message || "").split("\n")[0];
    } else if (st.drift) {
      state = "drift";
      why = st.drift.report.summary;
    } else if (st.lost) {
      state = "reconnecting";
      why = st.lost;
    } else if (st.attached) {
      state = "verifying";
    }
    if (st.verdict.state === state && st.verdict.why === why) return;
    st.verdict = { state, why };
    $("verdict").dataset.verdict = state;
    $("verdict-state").textContent = state === "failed" ? "ended" : state;
    $("verdict-why").textContent = why;
    $("verdict").title = why ? `the session's verdict: ${state}: ${why}` : `the session's verdict: ${state}`;
  }

  // What proves the frame shown: after a drift or the end, a verified frame is the last
  // verified one; the drifting step's worlds are named.
  function showCheck(m) {
    let text = CHECK_TEXT[m.check] || m.check;
    let cls = m.check;
    if (st.mode === "live" && m.check === "verified" && (st.drift || st.ended)) {
      text = "last verified frame";
      cls = "last_verified";
    } else if (m.world === "viewer") {
      text = "the viewer's world at the drifting step: not verified";
    } else if (m.world === "host") {
      text = "the host's world at the drifting step: not verified";
    }
    $("check").textContent = text;
    $("check").className = `check ${cls}`;
  }

  // A frame: the viewer's picture as it is, then the page's own marks on top of it.
  function draw(m) {
    for (const g of document.querySelectorAll("#picture g.body.marked, #picture g.body.pinned")) {
      g.classList.remove("marked", "pinned");
    }
    const t0 = performance.now();
    picture.set(m.svg);
    st.setMs += performance.now() - t0;
    st.frame = m;
    $("step").textContent = num(m.step);
    showCheck(m);
    $("live-count").textContent = m.alive;
    $("slots").textContent = m.slots;
    if (m.marked !== null) mark(m.marked, "marked");
    if (st.pinned !== null) mark(st.pinned, "pinned");
    for (const b of document.querySelectorAll("#drift-worlds button")) {
      b.classList.toggle("on", b.dataset.world === m.world);
    }
    showBody(st.pinned !== null ? st.pinned : st.hover);
    if (st.mode === "replay") {
      $("timeline").value = m.step;
      if (document.activeElement !== $("step-input")) $("step-input").value = m.step;
    }
    const now = performance.now();
    st.drawn += 1;
    st.times.push(now);
    while (st.times.length && st.times[0] < now - 1000) st.times.shift();
    st.fps = st.times.length;
    if (st.ended) showEnded();
    else $("fps").textContent = st.fps;
  }

  function mark(index, cls) {
    const g = document.querySelector(`#picture g.body[data-index="${index}"]`);
    if (g) g.classList.add(cls);
  }

  // The fields of body `index` beside the picture (set only when they change, so that a
  // frame leaves the side panel's layout alone).
  let bodyHtml = null;
  function showBody(index) {
    const box = $("body");
    const b = index !== null && st.frame ? st.frame.bodies[index] : null;
    const html = b ? fieldsHtml(index, b) : '<p class="note">Hover over a body for its fields; click to keep them.</p>';
    if (html !== bodyHtml) {
      box.innerHTML = html;
      bodyHtml = html;
    }
  }
  function fieldsHtml(index, b) {
    const row = (k, v) => `<tr><th>${k}</th><td>${v}</td></tr>`;
    return (
      `<table class="fields">` +
      row("body", b.index + (st.pinned === index ? " (kept: click again to let go)" : "")) +
      row("alive", b.alive) +
      row("still", `${b.still} steps`) +
      row("position", `${b.pos.join(", ")} mm`) +
      row("velocity", `${b.vel.join(", ")} mm/step`) +
      `</table>`
    );
  }

  const bodyAt = (e) => {
    const g = e.target.closest && e.target.closest("g.body");
    return g ? Number(g.dataset.index) : null;
  };
  $("picture").addEventListener("mouseover", (e) => {
    st.hover = bodyAt(e);
    if (st.pinned === null) showBody(st.hover);
  });
  $("picture").addEventListener("click", (e) => {
    const i = bodyAt(e);
    for (const g of document.querySelectorAll("#picture g.body.pinned")) g.classList.remove("pinned");
    st.pinned = i === null || i === st.pinned ? null : i;
    if (st.pinned !== null) mark(st.pinned, "pinned");
    showBody(st.pinned !== null ? st.pinned : i);
  });

  for (const r of document.querySelectorAll('input[name="overlay"]')) {
    r.addEventListener("change", () => send({ type: "overlay", overlay: r.value }));
  }
  $("ghost").addEventListener("change", () => send({ type: "ghost", on: $("ghost").checked }));

  // The strip: the last steps coloured by what the viewer knows of them. Verified runs
  // are painted on the canvas in proportion; every other run (a gap, the drift, the attach
  // snapshot) is a marker element over it, never narrower than MARK_MIN CSS pixels however
  // many steps the strip spans, and kept inside the strip (one at its right end ends there).
  const MARK_MIN = 6;
  let marksKey = null;
  function drawStrip(s) {
    const c = $("strip");
    const w = c.clientWidth || 1000;
    if (c.width !== w) c.width = w;
    const g = c.getContext("2d");
    g.fillStyle = "#0c0f15";
    g.fillRect(0, 0, c.width, c.height);
    const span = Math.max(1, s.to - s.from);
    const x = (step) => ((step - s.from) / span) * w;
    g.fillStyle = "#3ccf7a";
    for (const [from, to, kind] of s.runs) {
      if (kind === "verified") g.fillRect(x(from), 0, x(to) - x(from), c.height);
    }
    const marks = [];
    for (const [from, to, kind] of s.runs) {
      if (kind === "verified") continue;
      const width = Math.min(w, Math.max(MARK_MIN, x(to) - x(from)));
      const left = Math.max(0, Math.min(x(from), w - width));
      marks.push([from, to, kind, left, width]);
    }
    const key = JSON.stringify([w, marks]);
    if (key !== marksKey) {
      marksKey = key;
      const box = $("strip-marks");
      box.textContent = "";
      for (const [from, to, kind, left, width] of marks) {
        const m = document.createElement("span");
        m.className = kind;
        m.dataset.from = from;
        m.dataset.to = to;
        m.title = `${kind}: steps ${num(from)} to ${num(to)}`;
        m.style.left = `${left}px`;
        m.style.width = `${width}px`;
        box.appendChild(m);
      }
    }
    $("strip-range").textContent = `steps ${num(s.from)} to ${num(s.to)}`;
  }

  // Replay: one request in flight; the latest step wanted waits for it.
  function show(step) {
    if (!st.hello || st.mode !== "replay") return;
    step = Math.min(st.hello.last_step, Math.max(st.hello.first_step, Math.round(step)));
    if (st.pending) {
      st.wanted = step;
      return;
    }
    st.pending = true;
    st.askedStep = step;
    st.askedAt = performance.now();
    send({ type: "show", step });
  }
  const shown = () => (st.frame ? st.frame.step : 0);
  // The step the buttons count from: the latest asked for, shown or not yet (so that two
  // quick clicks on −1 go back two steps).
  const current = () => (st.wanted !== null ? st.wanted : st.pending ? st.askedStep : shown());

  function setPlaying(on) {
    st.playing = on;
    $("play").textContent = on ? "❚❚ pause" : "▶ play";
    st.lastTick = 0;
    st.carry = 0;
    if (on) requestAnimationFrame(tick);
  }
  function tick(now) {
    if (!st.playing) return;
    if (st.lastTick) st.carry += (st.speed * (now - st.lastTick)) / 1000;
    st.lastTick = now;
    const n = Math.floor(st.carry);
    if (n > 0 && !st.pending) {
      st.carry -= n;
      const target = Math.min(st.hello.last_step, shown() + n);
      show(target);
      if (target >= st.hello.last_step) {
        setPlaying(false);
        return;
      }
    }
    requestAnimationFrame(tick);
  }
  $("play").onclick = () => setPlaying(!st.playing);
  $("back").onclick = () => { setPlaying(false); show(current() - 1); };
  $("forward").onclick = () => { setPlaying(false); show(current() + 1); };
  $("first").onclick = () => { setPlaying(false); show(st.hello.first_step); };
  $("last").onclick = () => { setPlaying(false); show(st.hello.last_step); };
  $("speed").onchange = () => { st.speed = Number($("speed").value); };
  $("timeline").addEventListener("input", () => show(Number($("timeline").value)));
  $("step-input").addEventListener("change", () => show(Number($("step-input").value)));
  document.addEventListener("keydown", (e) => {
    if (st.mode !== "replay" || e.target.tagName === "INPUT" || e.target.tagName === "SELECT") return;
    const keys = {
      " ": () => setPlaying(!st.playing),
      ArrowLeft: () => $("back").onclick(),
      ArrowRight: () => $("forward").onclick(),
      Home: () => $("first").onclick(),
      End: () => $("last").onclick(),
    };
    if (keys[e.key]) {
      e.preventDefault();
      keys[e.key]();
    }
  });
})();
