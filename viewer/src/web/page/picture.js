// The picture in the page of `ostm-viewer watch` (docs/watch.md, "Drawing a frame"): keeps
// an SVG element in the page equal to the latest SVG text the viewer sent, changing only
// what differs from the frame before, so that the browser parses, styles, lays out and
// paints again only the parts that moved.
//
// The viewer writes one element per line: a line either holds whole elements (a body, a
// label, an overlay cell, a legend row) or opens or closes a group (`<g id="overlay">`,
// `</g>`, the root `<svg>`). When the new text has the same group lines as the shown one,
// each changed line of a group is patched in place: a line with the same elements and
// attribute names as before (a body that moved) gets only the attribute values and texts
// that differ; any other changed line, and lines added at a group's end, are parsed (all
// of them in one go) and put in place of the old; lines gone from a group's end are
// removed. Anything else (another overlay, a first frame) replaces the whole picture.
// Either way the picture is then exactly the one the text describes.
"use strict";
window.OstmPicture = (() => {
  const SVG_NS = "http://www.w3.org/2000/svg";

  // True when `line` holds whole elements only (as many opened as closed).
  const whole = (line) => {
    let opens = 0;
    let closes = 0;
    for (let i = 0; i < line.length; i++) {
      if (line.charCodeAt(i) !== 60) continue; // "<"
      const next = line.charCodeAt(i + 1);
      if (next === 47) closes++; // "</"
      else opens++;
    }
    for (let i = line.indexOf("/>"); i >= 0; i = line.indexOf("/>", i + 2)) closes++;
    return opens > 0 && opens === closes;
  };

  // A line's tags and texts: its shape (tag and attribute names, where texts are) and the
  // attribute values and texts in order, decoded; null when it holds a character
  // reference other than the four the viewer writes.
  const TOKEN = /<\/([A-Za-z][\w:-]*)>|<([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"]*")*)\s*(\/?)>|([^<]+)/g;
  const ATTR = /([\w:-]+)="([^"]*)"/g;
  const ENTITY = { "&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"' };
  const decode = (v) => (v.indexOf("&") < 0 ? v : v.replace(/&(amp|lt|gt|quot);/g, (e) => ENTITY[e]));
  function tokens(line) {
    if (/&(?!(amp|lt|gt|quot);)/.test(line)) return null;
    let shape = "";
    const attrs = [];
    const texts = [];
    let elements = 0;
    let m;
    let at = 0;
    TOKEN.lastIndex = 0;
    while ((m = TOKEN.exec(line))) {
      if (m.index !== at) return null;
      at = TOKEN.lastIndex;
      if (m[1]) shape += `</${m[1]}>`;
      else if (m[2]) {
        shape += `<${m[2]}`;
        let a;
        ATTR.lastIndex = 0;
        while ((a = ATTR.exec(m[3]))) {
          shape += ` ${a[1]}`;
          attrs.push([elements, a[1], decode(a[2])]);
        }
        shape += m[4] ? "/>" : ">";
        elements++;
      } else {
        shape += "#";
        texts.push(decode(m[5]));
      }
    }
    if (at !== line.length) return null;
    return { shape, attrs, texts, elements };
  }

  // A line's elements (in document order) and text nodes, for patching it in place.
  function partsOf(nodes) {
    const elements = [];
    const texts = [];
    for (const n of nodes) {
      elements.push(n);
      for (const e of n.querySelectorAll("*")) elements.push(e);
      const w = document.createTreeWalker(n, NodeFilter.SHOW_TEXT);
      for (let t = w.nextNode(); t; t = w.nextNode()) texts.push(t);
    }
    return { elements, texts };
  }

  // Sets the values of `now` that differ from `was` (tokens of the same shape) on the
  // line's elements and text nodes.
  function setValues(parts, was, now) {
    for (let k = 0; k < now.attrs.length; k++) {
      const [e, name, value] = now.attrs[k];
      if (was.attrs[k][2] !== value) parts.elements[e].setAttribute(name, value);
    }
    for (let k = 0; k < now.texts.length; k++) {
      if (was.texts[k] !== now.texts[k]) parts.texts[k].nodeValue = now.texts[k];
    }
  }

  const isNewline = (n) => n.nodeType === 3 && n.nodeValue === "\n";

  // Splits `parent`'s children into lines: the elements of each, and its newline node;
  // null when they are not whole lines of elements each ended by one newline.
  function splitLines(parent) {
    const out = [];
    let run = [];
    for (let n = parent.firstChild; n; n = n.nextSibling) {
      if (isNewline(n)) {
        if (!run.length) return null;
        out.push({ nodes: run, nl: n });
        run = [];
      } else if (n.nodeType === 1) {
        run.push(n);
      } else {
        return null;
      }
    }
    return run.length ? null : out;
  }

  class Picture {
    constructor(box) {
      this.box = box;
      // The shown SVG's lines; per line its elements (null for a group line) and the
      // newline node that ends it. `lines` is null when the picture cannot be patched.
      this.lines = null;
      this.nodes = null;
      this.nl = null;
      // Per line, once needed: its tokens and its elements and text nodes.
      this.tok = null;
      this.parts = null;
      this.scratch = document.createElementNS(SVG_NS, "svg");
      // How many frames replaced the whole picture, and how many were patched.
      this.replaced = 0;
      this.patched = 0;
      // Set (from the console) to replace the whole picture at every frame, as the page
      // did before it patched: the benchmark's baseline.
      this.whole = false;
    }

    // Shows `svg`.
    set(svg) {
      const lines = svg.split("\n");
      if (!(this.lines && !this.whole && this.patch(lines))) this.replace(svg, lines);
    }

    replace(svg, lines) {
      this.box.innerHTML = svg;
      this.replaced++;
      this.map(lines);
    }

    // Finds each line's nodes in the picture just put in.
    map(lines) {
      this.lines = null;
      const root = this.box.firstElementChild;
      if (!root || root !== this.box.firstChild) return;
      const nodes = [];
      const nl = [];
      let run = [];
      let group = false;
      let bad = false;
      const end = (n) => {
        const i = nodes.length;
        nodes.push(!group && run.length && whole(lines[i] || "") ? run : null);
        nl.push(n);
        run = [];
        group = false;
      };
      const walk = (parent) => {
        for (let n = parent.firstChild; n && !bad; n = n.nextSibling) {
          if (isNewline(n)) end(n);
          else if (n.nodeType === 1 && n.textContent.indexOf("\n") >= 0) {
            group = true;
            walk(n);
          } else if (n.nodeType === 1) run.push(n);
          else bad = true;
        }
      };
      group = true;
      walk(root);
      const after = root.nextSibling;
      if (bad || !after || !isNewline(after) || after.nextSibling) return;
      end(after);
      // The text ends with a newline: its last "line" is empty.
      if (nodes.length !== lines.length - 1 || lines[lines.length - 1] !== "") return;
      nodes.push(null);
      nl.push(null);
      this.lines = lines;
      this.nodes = nodes;
      this.nl = nl;
      this.tok = new Array(lines.length);
      this.parts = new Array(lines.length);
    }

    // Patches the shown picture into `lines`; false (nothing changed) when it cannot.
    patch(lines) {
      const old = this.lines;
      const groupsOld = [];
      const groupsNew = [];
      for (let i = 0; i < old.length; i++) if (!this.nodes[i]) groupsOld.push(i);
      for (let i = 0; i < lines.length; i++) if (!whole(lines[i])) groupsNew.push(i);
      if (groupsOld.length !== groupsNew.length) return false;
      for (let k = 1; k < groupsOld.length; k++) {
        if (old[groupsOld[k]] !== lines[groupsNew[k]]) return false;
      }
      // The work, checked before anything changes: lines to patch in place, to parse and
      // put in place of the old, to add and to remove.
      const tok = this.tok.slice();
      const parts = this.parts.slice();
      const oldTokens = (i) => (tok[i] === undefined ? (tok[i] = tokens(old[i])) : tok[i]);
      const inPlace = []; // [old index, the new line's tokens]
      const texts = [];
      const swap = []; // [old index, text slot]
      const add = []; // [after old index, new index, text slot]
      const drop = []; // old index
      for (let k = 0; k + 1 < groupsOld.length; k++) {
        const [oa, ob] = [groupsOld[k], groupsOld[k + 1]];
        const [na, nb] = [groupsNew[k], groupsNew[k + 1]];
        const common = Math.min(ob - oa, nb - na) - 1;
        for (let j = 1; j <= common; j++) {
          const [o, line] = [oa + j, lines[na + j]];
          if (old[o] === line) continue;
          const was = oldTokens(o);
          const now = tokens(line);
          if (was && now && was.shape === now.shape) {
            if (!parts[o]) parts[o] = this.parts[o] = partsOf(this.nodes[o]);
            if (parts[o].elements.length === now.elements && parts[o].texts.length === now.texts.length) {
              inPlace.push([o, now]);
              continue;
            }
          }
          swap.push([o, texts.push(line) - 1]);
        }
        for (let j = common + 1; na + j < nb; j++) {
          add.push([oa + common, na + j, texts.push(lines[na + j]) - 1]);
        }
        for (let j = common + 1; oa + j < ob; j++) drop.push(oa + j);
      }
      // The root's own attributes (its step).
      let rootTokens = null;
      if (old[0] !== lines[0]) {
        const was = oldTokens(0);
        rootTokens = tokens(lines[0]);
        if (!was || !rootTokens || was.shape !== rootTokens.shape) return false;
      }
      let parsed = [];
      if (texts.length) {
        this.scratch.innerHTML = texts.join("\n") + "\n";
        parsed = splitLines(this.scratch);
        if (!parsed || parsed.length !== texts.length) return false;
      }
      // Now the changes.
      if (rootTokens) {
        setValues({ elements: [this.box.firstElementChild], texts: [] }, tok[0], rootTokens);
        tok[0] = rootTokens;
      }
      const nodes = this.nodes.slice();
      const nl = this.nl.slice();
      for (const [o, now] of inPlace) {
        setValues(parts[o], tok[o], now);
        tok[o] = now;
      }
      for (const [o, slot] of swap) {
        const was = nodes[o];
        const now = parsed[slot].nodes;
        const parent = was[0].parentNode;
        for (const n of now) parent.insertBefore(n, was[0]);
        for (const n of was) parent.removeChild(n);
        nodes[o] = now;
        tok[o] = undefined;
        parts[o] = undefined;
      }
      // Added lines go after the last line their group kept, in order.
      const added = new Map();
      for (const [after, , slot] of add) {
        const anchor = nl[after];
        const before = (added.get(after) || anchor).nextSibling;
        const { nodes: now, nl: end } = parsed[slot];
        for (const n of now) anchor.parentNode.insertBefore(n, before);
        anchor.parentNode.insertBefore(end, before);
        added.set(after, end);
      }
      for (const o of drop) {
        for (const n of nodes[o]) n.remove();
        nl[o].remove();
      }
      // The line maps, in the new text's numbering.
      const newNodes = new Array(lines.length).fill(null);
      const newNl = new Array(lines.length).fill(null);
      const newTok = new Array(lines.length);
      const newParts = new Array(lines.length);
      newTok[0] = tok[0];
      for (let k = 0; k < groupsOld.length; k++) newNl[groupsNew[k]] = nl[groupsOld[k]];
      for (let k = 0; k + 1 < groupsOld.length; k++) {
        const [oa, ob] = [groupsOld[k], groupsOld[k + 1]];
        const [na, nb] = [groupsNew[k], groupsNew[k + 1]];
        for (let j = 1; j < Math.min(ob - oa, nb - na); j++) {
          newNodes[na + j] = nodes[oa + j];
          newNl[na + j] = nl[oa + j];
          newTok[na + j] = tok[oa + j];
          newParts[na + j] = parts[oa + j];
        }
      }
      for (const [, n, slot] of add) {
        newNodes[n] = parsed[slot].nodes;
        newNl[n] = parsed[slot].nl;
      }
      this.lines = lines;
      this.nodes = newNodes;
      this.nl = newNl;
      this.tok = newTok;
      this.parts = newParts;
      this.patched++;
      return true;
    }
  }
  return Picture;
})();
