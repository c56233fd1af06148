/* ldpfleet dashboard: plain JavaScript, no framework, nothing fetched from another host.
 *
 * It reads the operators' HTTP API of `ldpfleet serve --http` (the JSON of `campaign list`,
 * `campaign status NAME`, `estimate NAME` and `campaign trend NAME`) with the bearer token of
 * `?token=` (kept in sessionStorage for this tab, then removed from the address bar) and
 * redraws every few seconds. Every number shown carries `data-field` (what it is) and
 * `data-value` (the API's number, unrounded), so a test can compare the page with the API.
 * The chart of a campaign draws exactly the rows its table lists from (one request): the
 * estimates of its open phase, or a two-phase protocol's answer in its last phase; rows that
 * do not stand out of the noise (the API's `noise`) are drawn apart. A recurring campaign
 * (its status has a `schedule`) shows its latest round with reports, and a chart of its rounds
 * (the API's /series: the top items of that round, each round's estimate with its interval).
 */
"use strict";

(function () {
  const TOKEN_KEY = "ldpfleet.token";
  const EXPANDED_KEY = "ldpfleet.expanded";
  const INTERVAL_KEY = "ldpfleet.interval";
  const TABLE_TOP = 10;      // heavy hitters in the table
  const CHART_TOP = 32;      // items in the chart
  const DEFAULT_OPEN = 6;    // campaigns shown in detail unless the user chooses
  const SERIES_TOP = 5;      // items followed over the rounds
  const SERIES_LAST = 30;    // rounds in the per-round chart
  const SVG = "http://www.w3.org/2000/svg";

  let token = readToken();
  let timer = null;
  let renders = 0;
  let expanded = loadExpanded();
  let inflight = null;       // the refresh under way, if any
  let again = false;         // another refresh was asked for meanwhile

  // --- the token -----------------------------------------------------------------------------

  function readToken() {
    const url = new URL(window.location.href);
    const fromUrl = url.searchParams.get("token");
    if (fromUrl) {
      sessionStorage.setItem(TOKEN_KEY, fromUrl);
      // Keep the token out of the address bar, the history and anything copied from it.
      url.searchParams.delete("token");
      history.replaceState(null, "", url.pathname + url.search + url.hash);
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  class AuthError extends Error {}

  async function api(path) {
    const headers = {Accept: "application/json"};
    if (token) headers.Authorization = "Bearer " + token;
    // Relative to the page: the dashboard also works behind a proxy under a path prefix.
    const resp = await fetch(new URL(path, document.baseURI), {
      headers: headers, cache: "no-store", credentials: "omit"});
    if (resp.status === 401) throw new AuthError("the API wants a (valid) bearer token");
    if (!resp.ok) {
      let detail = "";
      try { detail = (await resp.json()).detail; } catch (e) { /* not JSON */ }
      throw new Error(path + ": HTTP " + resp.status + (detail ? ": " + detail : ""));
    }
    return resp.json();
  }

  function campaignPath(name) {
    return "campaigns/" + encodeURIComponent(name);
  }

  // --- formatting ----------------------------------------------------------------------------

  const INT = new Intl.NumberFormat("en-US", {maximumFractionDigits: 0});
  const ONE = new Intl.NumberFormat("en-US", {minimumFractionDigits: 1, maximumFractionDigits: 1});

  function fmtInt(v) { return INT.format(v); }
  function fmtCount(v) { return Math.abs(v) >= 10000 ? INT.format(v) : ONE.format(v); }
  function fmtPct(v) {
    const p = v * 100;
    const digits = Math.abs(p) < 10 ? 2 : 1;
    return p.toFixed(digits) + "%";
  }
  function fmtEps(v) { return String(Number(v.toFixed(3))); }
  function fmtShare(v) { return Number(v.toPrecision(3)).toString(); }
  function fmtTime(seconds) {
    if (seconds === null || seconds === undefined) return "";
    const d = new Date(seconds * 1000);
    return d.toLocaleString("en-GB", {year: "numeric", month: "short", day: "numeric",
                                      hour: "2-digit", minute: "2-digit"});
  }

  // --- DOM helpers ---------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    setAttrs(node, attrs);
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      node.setAttribute(k, v === true ? "" : String(v));
    }
  }

  /** A number as shown: its text, `data-field` and the API's exact value in `data-value`. */
  function num(field, value, format, cls) {
    if (value === null || value === undefined) return el("span", {class: "na"}, "–");
    return el("span", {class: "n" + (cls ? " " + cls : ""), "data-field": field,
                       "data-value": value}, format(value));
  }

  // --- one refresh ---------------------------------------------------------------------------

  /** One refresh at a time; a request meanwhile (a click) runs once the current one ends. */
  function refresh() {
    clearTimeout(timer);
    if (inflight) {
      again = true;
      return inflight;
    }
    inflight = redraw().finally(() => {
      inflight = null;
      if (again) {
        again = false;
        refresh();
      } else {
        schedule();
      }
    });
    return inflight;
  }

  async function redraw() {
    try {
      const rows = await api("campaigns");
      const names = shownCampaigns(rows);
      const details = await Promise.all(names.map(loadCampaign));
      renderOverview(rows, new Set(names));
      renderDetails(details);
      document.getElementById("auth").hidden = true;
      renders += 1;
      document.body.dataset.renders = String(renders);
      document.body.dataset.state = "ok";
      setStatus("ok", "live · " + rows.length + " campaign" + (rows.length === 1 ? "" : "s"));
      document.getElementById("updated").textContent =
        "updated " + new Date().toLocaleTimeString("en-GB");
    } catch (err) {
      if (err instanceof AuthError) {
        document.body.dataset.state = "auth";
        document.getElementById("auth").hidden = false;
        setStatus("error", "no valid token");
      } else {
        document.body.dataset.state = "error";
        setStatus("error", "API: " + (err && err.message ? err.message : err) + " (retrying)");
      }
    }
  }

  function schedule() {
    clearTimeout(timer);
    const seconds = Number(document.getElementById("interval").value);
    if (seconds > 0) timer = setTimeout(refresh, seconds * 1000);
  }

  function setStatus(kind, text) {
    const node = document.getElementById("status");
    node.textContent = text;
    node.className = "status " + kind;
  }

  /** Which campaigns are drawn in detail: the user's choice, else the open ones (a few). */
  function shownCampaigns(rows) {
    const known = rows.filter((r) => Object.prototype.hasOwnProperty.call(expanded, r.campaign));
    const defaults = rows.filter((r) => r.state === "open").slice(0, DEFAULT_OPEN)
      .map((r) => r.campaign);
    if (!defaults.length && rows.length) defaults.push(rows[rows.length - 1].campaign);
    const shown = new Set(defaults);
    for (const r of known) {
      if (expanded[r.campaign]) shown.add(r.campaign); else shown.delete(r.campaign);
    }
    return rows.map((r) => r.campaign).filter((n) => shown.has(n));
  }

  function loadExpanded() {
    try { return JSON.parse(sessionStorage.getItem(EXPANDED_KEY)) || {}; } catch (e) { return {}; }
  }

  function toggle(name, show) {
    expanded[name] = show;
    sessionStorage.setItem(EXPANDED_KEY, JSON.stringify(expanded));
    refresh();
  }

  /** A campaign's status, its trend and its estimates: a two-phase protocol in its second
   *  phase gives the protocol's answer, which both the table and the chart show (LDPLCM's
   *  answer covers the whole domain: its CHART_TOP largest). */
  async function loadCampaign(name) {
    const [status, trend] = await Promise.all([api(campaignPath(name)),
                                               api(campaignPath(name) + "/trend")]);
    const out = {name: name, status: status, trend: trend, estimate: null, answer: null,
                 series: null, error: null};
    const mean = status.schedule && status.phases[0].mechanism === "lbitmean";
    try {
      if (status.schedule) {
        out.series = await api(campaignPath(name) + "/series?format=json&last=" + SERIES_LAST +
                               (mean ? "" : "&top=" + SERIES_TOP));
      }
      if (status.domain.range || mean) {  // numeric: means or a histogram, no item list (no top)
        out.estimate = await api(campaignPath(name) + "/estimate?format=json");
      } else if (status.protocol && status.phase >= 2) {
        const top = status.protocol.protocol === "ldplcm" ? "&top=" + CHART_TOP : "";
        out.answer = await api(campaignPath(name) + "/estimate?format=json" + top);
      } else {
        out.estimate = await api(campaignPath(name) + "/estimate?format=json&top=" + CHART_TOP);
      }
    } catch (err) {
      if (err instanceof AuthError) throw err;
      out.error = err.message || String(err);
    }
    return out;
  }

  // --- the campaign list ---------------------------------------------------------------------

  function renderOverview(rows, shown) {
    document.getElementById("overview").hidden = false;
    document.getElementById("no-campaigns").hidden = rows.length > 0;
    const body = document.querySelector("#campaign-table tbody");
    const trs = rows.map((r) => {
      const n = r.campaign;
      const isShown = shown.has(n);
      const button = el("button", {type: "button", class: "link", "aria-expanded": isShown},
                        isShown ? "hide" : "show");
      button.addEventListener("click", () => toggle(n, !isShown));
      const link = isShown ? el("a", {href: "#c-" + slug(n)}, n) : n;
      return el("tr", {class: isShown ? "shown" : ""},
        el("td", {class: "name"}, link),
        el("td", null, stateBadge(r.state, r.phase, r.mechanisms.length)),
        el("td", {class: "num"}, num("overview." + n + ".phase", r.phase, fmtInt),
           r.mechanisms.length > 1 ? " / " + r.mechanisms.length : ""),
        el("td", null, r.mechanisms.join(" → ")),
        el("td", {class: "num"}, num("overview." + n + ".accepted", r.accepted, fmtInt)),
        el("td", {class: "num"}, num("overview." + n + ".rejected_other", rejectedOnly(r.rejected,
                                     r.duplicates), fmtInt,
                                     rejectedOnly(r.rejected, r.duplicates) ? "warn" : "")),
        el("td", {class: "num"}, num("overview." + n + ".duplicates", r.duplicates || 0,
                                     fmtInt, "resent")),
        el("td", {class: "num"}, button));
    });
    body.replaceChildren(...trs);
  }

  /** Rejections other than re-sends: a duplicate is a report the aggregator already counted,
   *  sent again (a device that missed its acknowledgement, a broker redelivery), not a fault. */
  function rejectedOnly(rejected, duplicates) {
    return Math.max(0, (rejected || 0) - (duplicates || 0));
  }

  function stateBadge(state, phase, phases) {
    if (state === "closed") return el("span", {class: "badge closed"}, "closed");
    if (phases > 1) {
      return el("span", {class: "badge phase" + Math.min(phase, 2)},
                "phase " + phase + " of " + phases);
    }
    return el("span", {class: "badge open"}, "open");
  }

  function slug(name) {
    return name.replace(/[^A-Za-z0-9_-]/g, "_");
  }

  // --- one campaign --------------------------------------------------------------------------

  function renderDetails(details) {
    const box = document.getElementById("details");
    const old = new Map([...box.children].map((c) => [c.dataset.campaign, c]));
    const cards = details.map((d) => {
      const card = old.get(d.name) || el("section", {class: "card campaign",
                                                     "data-campaign": d.name});
      card.id = "c-" + slug(d.name);
      card.replaceChildren(...campaignCard(d));
      return card;
    });
    box.replaceChildren(...cards);
  }

  function campaignCard(d) {
    const s = d.status;
    const n = d.name;
    const parts = [];
    parts.push(el("div", {class: "card-head"},
      el("h2", null, n),
      stateBadge(s.state, s.phase, s.phases.length),
      el("span", {class: "meta"},
         (s.domain.range ? "numeric domain " + s.domain.range
                         : s.domain.type + " domain of " + fmtInt(s.domain.size) + " items") + " · created " +
         fmtTime(s.created_at) + (s.state === "closed" ? " · closed " + fmtTime(s.closed_at)
                                                       : " · valid until " + fmtTime(s.not_after))),
      s.schedule ? scheduleLine(s) : null));
    parts.push(totals(s));
    parts.push(...coverageParts(s));
    if (s.protocol) parts.push(protocolLine(s));
    parts.push(phaseTrack(s));

    const body = el("div", {class: "card-body"});
    const chartBox = el("div", {class: "chart-box"});
    const side = el("div", {class: "side"});
    const shown = d.answer || d.estimate;
    if (d.error) {
      chartBox.append(el("p", {class: "error"}, "estimate: " + d.error));
    } else if (shown && shown.numeric) {
      if (shown.numeric.histogram) chartBox.append(histogramChart(n, shown));
    } else if (shown) {
      chartBox.append(chartTitle(shown), estimateChart(n, shown));
    }
    if (d.series) chartBox.append(seriesChart(n, d.series));
    if (d.trend) chartBox.append(trendChart(n, d.trend));
    if (d.answer) {
      side.append(answerTable(n, d.answer));
    } else if (d.estimate && d.estimate.numeric) {
      side.append(numericMeans(n, d.estimate));
    } else if (d.estimate) {
      side.append(heavyHitters(n, d.estimate));
    }
    side.append(rejections(s));
    body.append(chartBox, side);
    parts.push(body);
    const warnings = [].concat((shown && shown.warnings) || []);
    if (warnings.length) {
      parts.push(el("ul", {class: "warnings"}, [...new Set(warnings)].map((w) => el("li", null, w))));
    }
    return parts;
  }

  /** ε spent per device: the phases add up (sequential composition), unless each device
   *  reports in one phase only (LDPLCM's public split, `sample_rate_ppm`): then the largest. */
  function epsilonPerDevice(s) {
    const eps = s.phases.map((p) => p.epsilon);
    const split = s.phases.some((p) => p.sample_rate_ppm !== undefined && p.sample_rate_ppm !== null);
    return {value: split ? Math.max(...eps) : eps.reduce((a, b) => a + b, 0), split: split};
  }

  function totals(s) {
    const n = s.campaign;
    const eps = epsilonPerDevice(s);
    return el("div", {class: "totals"},
      stat("accepted", num("campaign." + n + ".accepted", s.accepted, fmtInt)),
      stat("received", num("campaign." + n + ".received", s.received, fmtInt)),
      stat("rejected", num("campaign." + n + ".rejected_other",
                           rejectedOnly(s.rejected_total, s.rejected.duplicate), fmtInt,
                           rejectedOnly(s.rejected_total, s.rejected.duplicate) ? "warn" : ""),
           "re-sends not included"),
      stat("re-sent", num("campaign." + n + ".duplicates", s.rejected.duplicate || 0, fmtInt,
                          "resent"), "duplicates of counted reports"),
      stat("ε per device", num("campaign." + n + ".epsilon.total", eps.value, fmtEps),
           s.phases.length > 1 ? (eps.split ? "each device reports in one phase"
                                            : "sum of the phases") : "one phase"));
  }

  /** Coverage (`serve --devices-file`): devices with an accepted report of the provisioned
   *  ones; without the file, how many devices reported. [] when the keys were purged. */
  function coverageParts(s) {
    const c = s.coverage;
    if (!c) return [];
    const f = "campaign." + s.campaign + ".coverage.";
    if (c.provisioned === null || c.provisioned === undefined) {
      return [el("div", {class: "coverage meta"}, num(f + "reported", c.reported, fmtInt),
                 " devices accepted (serve --devices-file gives the provisioned fleet)")];
    }
    return [el("div", {class: "coverage"}, num(f + "reported", c.reported, fmtInt),
               " devices accepted of ", num(f + "provisioned", c.provisioned, fmtInt),
               " provisioned (", num(f + "ratio", c.ratio, fmtPct,
                                     c.ratio !== null && c.ratio < 0.9 ? "warn" : ""), ")")];
  }

  function stat(label, value, note) {
    return el("div", {class: "stat"}, el("div", {class: "stat-value"}, value),
              el("div", {class: "stat-label"}, label), note ? el("div", {class: "stat-note"}, note) : null);
  }

  function protocolLine(s) {
    const p = s.protocol;
    const last = s.phases.length;
    let text;
    if (s.state === "closed") text = "closed after phase " + s.phase + " of " + last;
    else if (s.phase < last) {
      text = ["phase " + s.phase + " of " + last + ": collecting; ",
              el("code", null, "ldpfleet campaign advance " + s.campaign),
              " starts phase " + (s.phase + 1)];
    } else text = "phase " + s.phase + " of " + last + ": collecting; the heavy hitters are the protocol's answer";
    const params = protocolParams(s.campaign, p);
    return el("div", {class: "protocol"},
              el("div", null, el("strong", null, p.protocol), " · ", text),
              params.length ? el("div", {class: "params"}, params) : null);
  }

  /** A protocol's parameters as labelled fields (never its raw JSON): the ones an operator
   *  reads, each with its meaning; auto's plan and svim's separation test in one line each. */
  function protocolParams(n, p) {
    const f = "campaign." + n + ".protocol.";
    const out = [];
    const field = (label, value, title) => out.push(el("span", {class: "param", title: title || null},
      el("span", {class: "param-label"}, label), " ", value));
    const number = (key, fmt) => num(f + key, p[key], fmt || fmtInt);
    if (p.k !== undefined && p.k !== null) field("top k", number("k"), "heavy hitters asked for");
    if (p.k_max !== undefined && p.k_max !== null) {
      field("candidates", number("k_max"), "phase 1 picks this many candidates for phase 2");
    }
    if (p.set_size !== undefined && p.set_size !== null) {
      field("set size", number("set_size"), "items per device (padded or sampled to this length)");
    }
    if (p.budget_split !== undefined && p.budget_split !== null) {
      field("phase-1 share of ε", number("budget_split", fmtPct));
    }
    if (p.theta !== undefined && p.theta !== null) {
      field("θ", number("theta", fmtShare), "share of devices the model treats as high-frequent");
    }
    if (p.theta_measured !== undefined && p.theta_measured !== null) {
      field("θ measured", number("theta_measured", fmtShare));
    }
    if (p.sample_rate_ppm !== undefined && p.sample_rate_ppm !== null) {
      field("phase-1 devices", num(f + "sample_rate", p.sample_rate_ppm / 1e6, fmtPct));
    }
    if (p.branch) field("branch", el("span", {"data-field": f + "branch"}, p.branch));
    if (p.separation) {
      const sep = p.separation;
      field("separation", [
        sep.z === null || sep.z === undefined ? "all candidates"
          : ["z ", num(f + "separation.z", sep.z, fmtShare)],
        sep.separable ? " (head separated)" : " (flat: no separated head)"],
        "phase 1's k/2-th score against the (k_max+1)-th, in standard deviations");
    }
    if (p.plan) {
      const plan = p.plan;
      const rows = (plan.rows || []).filter((r) => r.feasible && r.predicted_sd !== null
                                             && r.predicted_sd !== undefined)
        .sort((a, b) => a.predicted_sd - b.predicted_sd);
      const next = rows.find((r) => r.cli_name !== plan.chosen_protocol
                                    && r.protocol !== plan.chosen);
      field("chosen by auto", [
        el("span", {"data-field": f + "plan.chosen"}, plan.chosen_protocol || plan.chosen),
        plan.predicted_error !== undefined && plan.predicted_error !== null
          ? [", predicted error ", num(f + "plan.predicted_error", plan.predicted_error, fmtShare)]
          : null,
        next ? [" (next: " + next.cli_name + " ", num(f + "plan.next", next.predicted_sd, fmtShare),
                ")"] : null],
        "`--protocol auto` rated every protocol for the fleet size; the smallest predicted error won");
    }
    return out;
  }

  function phaseState(s, p) {
    if (s.state === "closed") return ["closed", "closed"];
    if (p.phase === s.phase) return ["open", "current"];
    if (p.phase < s.phase) return ["done", "done"];
    return ["pending", "pending"];
  }

  function phaseTrack(s) {
    const n = s.campaign;
    const boxes = s.phases.map((p) => {
      const [label, cls] = phaseState(s, p);
      const err = p.expected_error || {};
      return el("div", {class: "phase " + cls},
        el("div", {class: "phase-head"}, el("span", null, "phase " + p.phase),
           el("span", {class: "phase-state", "data-field": "campaign." + n + ".state.phase" + p.phase},
              label)),
        el("div", {class: "phase-reports"},
           num("campaign." + n + ".accepted.phase" + p.phase, p.reports, fmtInt),
           el("span", {class: "unit"}, " reports")),
        el("div", {class: "phase-meta"},
           p.mechanism, " · ε ", num("campaign." + n + ".epsilon.phase" + p.phase, p.epsilon, fmtEps),
           p.sample_rate_ppm !== undefined
             ? [" · ", num("campaign." + n + ".sample_rate.phase" + p.phase, p.sample_rate_ppm / 1e6, fmtPct),
                " of devices"] : null),
        err.ci_halfwidth_count !== undefined && err.ci_halfwidth_count !== null
          ? el("div", {class: "phase-meta"}, "± ",
               num("campaign." + n + ".ci_halfwidth.phase" + p.phase, err.ci_halfwidth_count, fmtCount),
               " devices per item (" + Math.round(err.confidence * 100) + "%)")
          : null);
    });
    const track = el("div", {class: "track"});
    boxes.forEach((b, i) => {
      if (i) track.append(el("div", {class: "arrow", "aria-hidden": "true"}, "→"));
      track.append(b);
    });
    return track;
  }

  function rejections(s) {
    const n = s.campaign;
    const entries = Object.entries(s.rejected).filter(([reason]) => reason !== "duplicate");
    const box = el("div", {class: "rejections"}, el("h3", null, "Rejected by reason"));
    if (!entries.length) {
      box.append(el("p", {class: "empty"}, "none"));
    } else {
      box.append(el("table", {class: "grid compact"},
        el("tbody", null, entries.map(([reason, count]) => el("tr", null,
          el("td", null, reason.replace(/_/g, " ")),
          el("td", {class: "num"}, num("campaign." + n + ".rejected." + reason, count, fmtInt)))))));
    }
    if (s.rejected.duplicate) {
      box.append(el("p", {class: "resent-note"},
        num("campaign." + n + ".rejected.duplicate", s.rejected.duplicate, fmtInt, "resent"),
        " re-sent reports (duplicates) were already counted once: devices re-send until " +
        "acknowledged, brokers redeliver after a restart; nothing is lost or counted twice"));
    }
    return box;
  }

  /** A numeric campaign's means (duchi, pm, hm; sw: the histogram's mean) with intervals. */
  function numericMeans(n, est) {
    const pct = Math.round((est.confidence || 0.95) * 100);
    const fmt = (v) => Number(v.toPrecision(5)).toString();
    const box = el("div", {class: "hitters"},
      el("h3", null, "Mean", el("span", {class: "meta"}, " " + phaseOrRound(est) + ", n = ",
         num("estimate." + n + ".n", est.n, fmtInt))));
    if (!est.n) {
      box.append(el("p", {class: "empty"}, "no reports yet"));
      return box;
    }
    box.append(el("div", {class: "table-box"}, el("table", {class: "grid"},
      el("thead", null, el("tr", null, el("th", null, "metric"), el("th", {class: "num"}, "reports"),
        el("th", {class: "num"}, "mean"), el("th", {class: "num"}, pct + "% interval"))),
      el("tbody", null, est.numeric.means.map((m) => {
        const f = "numeric." + n + "." + m.metric + ".";
        return el("tr", null, el("td", null, m.name || "metric " + m.metric),
          el("td", {class: "num"}, num(f + "reports", m.reports, fmtInt)),
          el("td", {class: "num"}, num(f + "mean", m.mean, fmt)),
          el("td", {class: "num ci"}, num(f + "ci_low", m.ci_low, fmt), " – ",
             num(f + "ci_high", m.ci_high, fmt)));
      })))));
    box.append(el("p", {class: "meta"}, est.numeric.interval));
    return box;
  }

  /** sw: the EMS histogram over the bins (fraction per bin; the interval band as a line). */
  function histogramChart(n, est) {
    const bins = est.numeric.histogram;
    const W = 720, H = 260, left = 58, right = 12, top = 24, bottom = 34;
    const plotW = W - left - right, plotH = H - top - bottom;
    const hi = Math.max(1e-12, ...bins.map((b) => b.ci_high));
    const x = (v) => left + (v - bins[0].low) / (bins[bins.length - 1].high - bins[0].low) * plotW;
    const y = (f) => top + plotH - f / hi * plotH;
    const bars = bins.map((b) => svg("rect", {x: x(b.low), width: Math.max(0.5, x(b.high) - x(b.low)),
      y: y(b.fraction), height: Math.max(0, plotH + top - y(b.fraction)), class: "bar",
      "data-field": "histogram." + n + "." + b.bin, "data-value": b.fraction}));
    const band = svg("polyline", {class: "ci", fill: "none", stroke: "currentColor", "stroke-width": 0.6,
      points: bins.map((b) => x((b.low + b.high) / 2) + "," + y(b.ci_high)).join(" ")});
    const axis = [bins[0].low, bins[bins.length - 1].high].map((v, i) =>
      svg("text", {x: i ? W - right : left, y: H - 12, "text-anchor": i ? "end" : "start"}, String(v)));
    return el("div", null,
      el("h3", null, "Distribution", el("span", {class: "meta"},
         " phase " + est.phase + " (sw, ε " + fmtEps(est.epsilon || 0) + "), " + bins.length + " bins")),
      svg("svg", {class: "chart", viewBox: "0 0 " + W + " " + H, role: "img"}, bars, band, axis));
  }

  function heavyHitters(n, est) {
    const rows = est.items.slice(0, TABLE_TOP);
    const pct = Math.round((est.confidence || 0.95) * 100);
    document.getElementById("confidence-note").textContent = pct + "%";
    const box = el("div", {class: "hitters"},
      el("h3", null, "Heavy hitters", el("span", {class: "meta"},
         (rows.length ? " top " + rows.length + " of" : "") + " " + phaseOrRound(est) + ", n = ",
         num("estimate." + n + ".n", est.n, fmtInt))));
    if (!rows.length) {
      box.append(el("p", {class: "empty"}, "no reports yet"));
      return box;
    }
    box.append(significanceNote("estimate." + n, est.significance));
    box.append(el("div", {class: "table-box"}, el("table", {class: "grid"},
      el("thead", null, el("tr", null, el("th", {class: "num"}, "#"), el("th", null, "item"),
        el("th", {class: "num"}, "devices"), el("th", {class: "num"}, "share"),
        el("th", {class: "num"}, pct + "% interval"))),
      el("tbody", null, rows.map((r) => {
        const f = "estimate." + n + "." + r.item + ".";
        return el("tr", {class: r.noise ? "noise" : null},
          el("td", {class: "num"}, num(f + "rank", r.rank, fmtInt)),
          itemCell(f, r),
          el("td", {class: "num"}, num(f + "estimate", r.estimate, fmtCount)),
          el("td", {class: "num"}, num(f + "frequency", r.frequency, fmtPct)),
          el("td", {class: "num ci"}, num(f + "ci_low", r.ci_low, fmtPct), " – ",
             num(f + "ci_high", r.ci_high, fmtPct)));
      })))));
    return box;
  }

  /** An item's cell: the item, and a `noise` tag where its estimate does not stand out of
   *  the noise of the list (the API's `noise`, carried in data-field ...noise). */
  function itemCell(f, r) {
    return el("td", {class: "item", title: String(r.item)}, String(r.item),
      r.noise === undefined ? null
        : el("span", {class: r.noise ? "tag noise" : "tag found", "data-field": f + "noise",
                      "data-value": String(r.noise),
                      title: r.noise ? "does not stand out of the noise of the whole list: "
                                       + "an estimate this large is what noise alone gives "
                                       + "some items nobody holds" : "stands out of the noise"},
              r.noise ? "noise" : ""));
  }

  /** How many rows stand out, and at what false-discovery rate (the API's `significance`). */
  function significanceNote(prefix, sig) {
    if (!sig) return null;
    const name = sig.procedure === "benjamini-hochberg" ? "Benjamini-Hochberg"
      : "Benjamini-Yekutieli";
    return el("p", {class: "signif"},
      num(prefix + ".discoveries", sig.discoveries, fmtInt),
      " of ", num(prefix + ".tested", sig.tested, fmtInt),
      " items stand out of the noise (" + name + ", false-discovery rate ",
      num(prefix + ".fdr", sig.fdr, (v) => Number((v * 100).toPrecision(3)) + "%"), "); rows marked ",
      el("span", {class: "tag noise"}, "noise"), " do not");
  }

  /** A two-phase protocol's answer (`estimate NAME` in its last phase): the heavy hitters. */
  function answerTable(n, ans) {
    const rows = ans.items;
    const extra = rows.some((r) => r.phase1_frequency !== undefined) ? "phase1_frequency"
      : rows.some((r) => r.high !== undefined) ? "high" : null;
    const box = el("div", {class: "hitters"},
      el("h3", null, "Heavy hitters", el("span", {class: "meta"},
         (rows.length > TABLE_TOP ? " top " + TABLE_TOP + " of" : "") + " the " + ans.protocol
         + " answer, n = ", num("answer." + n + ".n", ans.n, fmtInt))));
    if (!rows.length) {
      box.append(el("p", {class: "empty"}, "no heavy hitters yet"));
      return box;
    }
    box.append(significanceNote("answer." + n, ans.significance));
    box.append(el("div", {class: "table-box"}, el("table", {class: "grid"},
      el("thead", null, el("tr", null, el("th", {class: "num"}, "#"), el("th", null, "item"),
        el("th", {class: "num"}, "devices"), el("th", {class: "num"}, "share"),
        extra === "phase1_frequency" ? el("th", {class: "num"}, "phase-1 share")
          : extra === "high" ? el("th", null, "high") : null)),
      el("tbody", null, rows.slice(0, TABLE_TOP).map((r) => {
        const f = "answer." + n + "." + r.item + ".";
        return el("tr", {class: r.noise ? "noise" : null},
          el("td", {class: "num"}, num(f + "rank", r.rank, fmtInt)),
          itemCell(f, r),
          el("td", {class: "num"}, num(f + "estimate", r.estimate, fmtCount)),
          el("td", {class: "num"}, num(f + "frequency", r.frequency, fmtPct)),
          extra === "phase1_frequency"
            ? el("td", {class: "num"}, num(f + "phase1_frequency", r.phase1_frequency, fmtPct))
            : extra === "high" ? el("td", null, r.high ? "yes" : "no") : null);
      })))));
    return box;
  }

  // --- the chart -----------------------------------------------------------------------------

  /** The chart's title: one phase's estimates, or a protocol's answer. */
  function chartTitle(est) {
    const what = est.protocol ? " the " + est.protocol + " answer"
      : " " + phaseOrRound(est) + " (" + (est.mechanism || "") + ", ε " + fmtEps(est.epsilon || 0) + ")";
    return el("h3", null, "Estimated devices per item",
              el("span", {class: "meta"}, what + (est.items.length ? ", top " + est.items.length : "")));
  }

  /** "phase 1", or a recurring campaign's "round 3 of 30". */
  function phaseOrRound(est) {
    return est.round ? "round " + est.round + " of " + est.rounds : "phase " + est.phase;
  }

  function fmtEvery(seconds) {
    for (const [unit, s] of [["d", 86400], ["h", 3600], ["min", 60]]) {
      if (seconds % s === 0) return seconds / s + " " + unit;
    }
    return seconds + " s";
  }

  /** A recurring campaign's schedule: its period, the round open now and how many. */
  function scheduleLine(s) {
    const sc = s.schedule, n = s.campaign;
    return el("span", {class: "meta schedule"}, " · every " + fmtEvery(sc.every_s) + " · ",
      sc.current_round
        ? ["round ", num("campaign." + n + ".current_round", sc.current_round, fmtInt), " of "]
        : "no round open · ",
      num("campaign." + n + ".rounds", sc.rounds, fmtInt), sc.current_round ? "" : " rounds");
  }

  function niceStep(span, ticks) {
    const raw = span / Math.max(1, ticks);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * mag) return m * mag;
    return 10 * mag;
  }

  /** At most 12 characters; the middle goes (names often share a prefix: room-01, room-02). */
  function shortLabel(item) {
    const text = String(item);
    return text.length > 12 ? text.slice(0, 5) + "…" + text.slice(-6) : text;
  }

  /** Bars (estimated devices) with the interval as error bars, items by estimated rank: the
   *  demo's plot, without the truth the aggregator never sees. */
  function estimateChart(n, est) {
    const items = est.items;
    const W = 720, H = 300;
    if (!items.length) {
      return el("p", {class: "empty chart-empty"}, "no reports yet: the chart appears with the first estimate");
    }
    const count = (frac) => (frac === null || frac === undefined ? null : frac * est.n);
    const rows = items.map((r) => ({item: r.item, est: r.estimate, lo: count(r.ci_low),
                                    hi: count(r.ci_high), noise: r.noise}));
    const labels = rows.map((r) => shortLabel(r.item));
    const longest = Math.max(...labels.map((l) => l.length));
    const left = 58, right = 12, top = 30;
    const plotW = W - left - right;
    const band = plotW / rows.length;
    const rotate = longest * 6.2 > band - 4;
    const bottom = rotate ? 22 + Math.min(longest, 12) * 5.2 : 34;
    const plotH = H - top - bottom;
    let lo = 0, hi = 0;
    for (const r of rows) {
      lo = Math.min(lo, r.est, r.lo === null ? 0 : r.lo);
      hi = Math.max(hi, r.est, r.hi === null ? 0 : r.hi);
    }
    if (hi === lo) hi = lo + 1;
    const pad = (hi - lo) * 0.04;
    hi += pad;
    if (lo < 0) lo -= pad;
    const step = niceStep(hi - lo, 6);
    const y = (v) => top + plotH * (hi - v) / (hi - lo);
    const x = (i) => left + band * i;

    const root = svg("svg", {class: "chart", viewBox: "0 0 " + W + " " + H, role: "img",
                             "aria-label": "estimated devices per item with intervals",
                             preserveAspectRatio: "xMidYMid meet"});
    const grid = svg("g", {class: "grid-lines"});
    for (let k = Math.ceil(lo / step); k * step <= hi; k++) {
      const v = k * step;
      const yy = y(v);
      grid.append(svg("line", {x1: left, x2: W - right, y1: yy, y2: yy, class: k === 0 ? "zero" : ""}));
      grid.append(svg("text", {x: left - 6, y: yy + 3.5, class: "tick", "text-anchor": "end"},
                      fmtTick(v, step)));
    }
    root.append(grid);
    root.append(svg("text", {class: "axis-label", transform: "translate(13," + (top + plotH / 2) +
                             ") rotate(-90)", "text-anchor": "middle"}, "devices"));

    const bars = svg("g", {class: "bars"});
    rows.forEach((r, i) => {
      const cx = x(i) + band / 2;
      const bw = Math.max(2, Math.min(band * 0.68, 40));
      const y0 = y(0), y1 = y(r.est);
      const g = svg("g", {class: "bar"});
      g.append(svg("title", null, "item " + r.item + ": " + fmtCount(r.est) + " devices" +
                   (r.lo !== null ? " (interval " + fmtCount(r.lo) + " – " + fmtCount(r.hi) + ")" : "") +
                   (r.noise ? "; does not stand out of the noise" : "")));
      g.append(svg("rect", {x: cx - bw / 2, y: Math.min(y0, y1), width: bw,
                            height: Math.max(0.5, Math.abs(y1 - y0)),
                            class: (r.est < 0 ? "neg" : "") + (r.noise ? " noise" : ""),
                            "data-field": "chart." + n + "." + r.item + ".estimate",
                            "data-value": r.est,
                            "data-noise": r.noise === undefined ? null : String(r.noise)}));
      if (r.lo !== null && r.hi !== null) {
        const cap = Math.max(2, Math.min(bw * 0.3, 7));
        g.append(svg("line", {class: "err", x1: cx, x2: cx, y1: y(r.lo), y2: y(r.hi),
                              "data-field": "chart." + n + "." + r.item + ".ci",
                              "data-low": r.lo, "data-high": r.hi}));
        g.append(svg("line", {class: "err", x1: cx - cap, x2: cx + cap, y1: y(r.lo), y2: y(r.lo)}));
        g.append(svg("line", {class: "err", x1: cx - cap, x2: cx + cap, y1: y(r.hi), y2: y(r.hi)}));
      }
      const ly = top + plotH + 12;
      g.append(rotate
        ? svg("text", {class: "xlabel", "text-anchor": "end",
                       transform: "translate(" + (cx + 3) + "," + (ly - 4) + ") rotate(-55)"}, labels[i])
        : svg("text", {class: "xlabel", x: cx, y: ly, "text-anchor": "middle"}, labels[i]));
      bars.append(g);
    });
    root.append(bars);
    if (!rotate) {
      root.append(svg("text", {class: "axis-label", x: left + plotW / 2, y: H - 4,
                               "text-anchor": "middle"}, "item (by estimated rank)"));
    }
    // legend
    const lg = svg("g", {class: "legend"});
    lg.append(svg("rect", {x: 8, y: 6, width: 12, height: 9, class: "legend-bar"}));
    lg.append(svg("text", {x: 24, y: 14}, "estimate"));
    let end = 84;
    if (rows.some((r) => r.lo !== null && r.hi !== null)) {
      lg.append(svg("line", {class: "err", x1: 92, x2: 92, y1: 4, y2: 16}));
      lg.append(svg("line", {class: "err", x1: 88, x2: 96, y1: 4, y2: 4}));
      lg.append(svg("line", {class: "err", x1: 88, x2: 96, y1: 16, y2: 16}));
      lg.append(svg("text", {x: 102, y: 14}, Math.round((est.confidence || 0.95) * 100) + "% interval"));
      end = 176;
    }
    if (rows.some((r) => r.noise)) {
      lg.append(svg("rect", {x: end, y: 6, width: 12, height: 9, class: "legend-bar noise"}));
      lg.append(svg("text", {x: end + 16, y: 14}, "noise"));
      end += 56;
    }
    lg.setAttribute("transform", "translate(" + (W - right - end - 6) + ",2)");
    root.append(lg);
    return root;
  }

  /** Reports accepted over time (cumulative, the API's /trend: at most a point a minute, the
   *  last one now), with the re-sends and rejections beside them when there are any. */
  function trendChart(n, trend) {
    const pts = trend.points || [];
    const box = el("div", {class: "trend"}, el("h3", null, "Reports over time",
      el("span", {class: "meta"}, " cumulative, one point a minute while serve receives")));
    if (pts.length < 2) {
      box.append(el("p", {class: "empty"}, "the trend appears after serve's first minute of reports"));
      return box;
    }
    const W = 720, H = 150, left = 58, right = 12, top = 10, bottom = 24;
    const t0 = pts[0].at, t1 = Math.max(pts[pts.length - 1].at, t0 + 1);
    const series = [["accepted", "accepted"], ["duplicates", "re-sent"], ["rejected", "rejected"]]
      .filter(([key], i) => i === 0 || pts.some((p) => p[key] > 0));
    const hi = Math.max(1, ...pts.map((p) => Math.max(...series.map(([key]) => p[key]))));
    const step = niceStep(hi, 4);
    const x = (t) => left + (W - left - right) * (t - t0) / (t1 - t0);
    const y = (v) => top + (H - top - bottom) * (1 - v / (Math.ceil(hi / step) * step));
    const root = svg("svg", {class: "chart trend-chart", viewBox: "0 0 " + W + " " + H, role: "img",
                             "aria-label": "reports over time", preserveAspectRatio: "xMidYMid meet"});
    const grid = svg("g", {class: "grid-lines"});
    for (let v = 0; v <= Math.ceil(hi / step) * step; v += step) {
      grid.append(svg("line", {x1: left, x2: W - right, y1: y(v), y2: y(v), class: v === 0 ? "zero" : ""}));
      grid.append(svg("text", {x: left - 6, y: y(v) + 3.5, class: "tick", "text-anchor": "end"},
                      fmtTick(v, step)));
    }
    root.append(grid);
    for (const [key, label] of series) {
      root.append(svg("polyline", {class: "line " + key, fill: "none",
        points: pts.map((p) => x(p.at).toFixed(1) + "," + y(p[key]).toFixed(1)).join(" "),
        "data-field": "trend." + n + "." + key, "data-value": pts[pts.length - 1][key],
        "data-series": pts.map((p) => p[key]).join(","),
        "data-times": pts.map((p) => p.at).join(",")},
        svg("title", null, label + ": " + fmtInt(pts[pts.length - 1][key]))));
    }
    const when = (t) => new Date(t * 1000).toLocaleTimeString("en-GB", {hour: "2-digit", minute: "2-digit"});
    root.append(svg("text", {class: "tick", x: left, y: H - 6, "text-anchor": "start"}, when(t0)));
    root.append(svg("text", {class: "tick", x: W - right, y: H - 6, "text-anchor": "end"}, when(t1)));
    const lg = svg("g", {class: "legend", transform: "translate(" + (left + 8) + ",4)"});
    series.forEach(([key, label], i) => {
      lg.append(svg("line", {class: "line " + key, x1: i * 90, x2: i * 90 + 16, y1: 8, y2: 8}));
      lg.append(svg("text", {x: i * 90 + 20, y: 12}, label));
    });
    root.append(lg);
    box.append(root);
    return box;
  }

  /** A recurring campaign's rounds (the API's /series): each followed item's estimated share
   *  per round with its interval (hollow: it does not stand out of that round's noise), or
   *  lbitmean's mean per round. Rounds without reports leave a gap. */
  function seriesChart(n, series) {
    const rounds = series.series || [];
    const isMean = !series.items;
    const withData = rounds.filter((e) => e.n > 0);
    const pct = Math.round((series.confidence || 0.95) * 100);
    const box = el("div", {class: "series"}, el("h3", null, "Per round",
      el("span", {class: "meta"}, isMean ? " mean per round with its " + pct + "% interval"
        : " share of devices per round, top " + series.items.length + " of round " +
          series.items_from_round + ", " + pct + "% intervals; hollow: not above the noise")));
    if (!withData.length) {
      box.append(el("p", {class: "empty"}, "the per-round chart appears with the first round's reports"));
      return box;
    }
    const lines = isMean
      ? [{key: "mean", label: "mean", points: withData.filter((e) => e.mean).map((e) => ({
          round: e.round, v: e.mean.mean, lo: e.mean.low, hi: e.mean.high, noise: false}))}]
      : series.items.map((item) => ({key: String(item), label: shortLabel(item), points:
          withData.map((e) => {
            const x = e.estimates.find((r) => String(r.item) === String(item));
            return x && {round: e.round, v: x.frequency, lo: x.low, hi: x.high, noise: x.noise};
          }).filter(Boolean)}));
    const W = 720, H = 220, left = 58, right = 12, top = 26, bottom = 30;
    const r0 = rounds[0].round, r1 = Math.max(rounds[rounds.length - 1].round, r0 + 1);
    let lo = isMean ? Infinity : 0, hi = -Infinity;
    for (const l of lines) for (const p of l.points) { lo = Math.min(lo, p.lo); hi = Math.max(hi, p.hi); }
    if (!(hi > lo)) hi = lo + 1;
    const step = niceStep(hi - lo, 4);
    lo = Math.floor(lo / step) * step;
    hi = Math.ceil(hi / step) * step;
    const x = (r) => left + 10 + (W - left - right - 20) * (r - r0) / (r1 - r0);
    const y = (v) => top + (H - top - bottom) * (1 - (v - lo) / (hi - lo));
    const fmtV = isMean ? (v) => fmtTick(v, step) : (v) => (v * 100).toFixed(step * 100 < 1 ? 1 : 0) + "%";
    const root = svg("svg", {class: "chart series-chart", viewBox: "0 0 " + W + " " + H, role: "img",
                             "aria-label": "estimates per round", preserveAspectRatio: "xMidYMid meet"});
    const grid = svg("g", {class: "grid-lines"});
    for (let v = lo; v <= hi + step / 2; v += step) {
      grid.append(svg("line", {x1: left, x2: W - right, y1: y(v), y2: y(v),
                               class: Math.abs(v) < step / 1e6 ? "zero" : ""}));
      grid.append(svg("text", {x: left - 6, y: y(v) + 3.5, class: "tick", "text-anchor": "end"}, fmtV(v)));
    }
    root.append(grid);
    const every = Math.max(1, Math.ceil(rounds.length / 10));
    rounds.forEach((e, i) => {
      if (i % every === 0 || i === rounds.length - 1) {
        root.append(svg("text", {class: "tick", x: x(e.round), y: H - 12, "text-anchor": "middle"},
                        String(e.round)));
      }
    });
    root.append(svg("text", {class: "axis-label", x: left + (W - left - right) / 2, y: H - 1,
                             "text-anchor": "middle"}, "round"));
    lines.forEach((l, k) => {
      const g = svg("g", {class: "series-line s" + (k % 8)});
      // a gap where a round has no reports: one polyline per run of consecutive rounds
      let run = [];
      const flush = () => {
        if (run.length > 1) {
          g.append(svg("polyline", {fill: "none", class: "line",
            points: run.map((p) => x(p.round).toFixed(1) + "," + y(p.v).toFixed(1)).join(" ")}));
        }
        run = [];
      };
      l.points.forEach((p, i) => {
        if (i && p.round !== l.points[i - 1].round + 1) flush();
        run.push(p);
      });
      flush();
      for (const p of l.points) {
        const cx = x(p.round);
        g.append(svg("line", {class: "err", x1: cx, x2: cx, y1: y(p.lo), y2: y(p.hi)}));
        g.append(svg("circle", {cx: cx, cy: y(p.v), r: 3.2, class: p.noise ? "noise" : "",
          "data-field": "series." + n + "." + l.key + ".r" + p.round, "data-value": p.v,
          "data-low": p.lo, "data-high": p.hi, "data-noise": p.noise ? "true" : "false"},
          svg("title", null, (isMean ? "mean" : "item " + l.key) + ", round " + p.round + ": " +
              fmtV(p.v) + " [" + fmtV(p.lo) + ", " + fmtV(p.hi) + "]" +
              (p.noise ? " (not above the noise)" : ""))));
      }
      root.append(g);
    });
    if (!isMean) {
      const lg = svg("g", {class: "legend", transform: "translate(" + (left + 8) + ",4)"});
      lines.forEach((l, k) => {
        lg.append(svg("circle", {class: "series-line s" + (k % 8), cx: k * 100 + 5, cy: 8, r: 4}));
        lg.append(svg("text", {x: k * 100 + 13, y: 12}, l.label));
      });
      root.append(lg);
    }
    box.append(root);
    return box;
  }

  function fmtTick(v, step) {
    if (Math.abs(v) < step / 1e6) return "0";
    if (Math.abs(v) >= 1e6) return Number((v / 1e6).toPrecision(3)) + "M";
    if (Math.abs(v) >= 1e4) return Number((v / 1e3).toPrecision(3)) + "k";
    return step < 1 ? v.toFixed(Math.ceil(-Math.log10(step))) : INT.format(v);
  }

  // --- start ---------------------------------------------------------------------------------

  function start() {
    const select = document.getElementById("interval");
    const saved = sessionStorage.getItem(INTERVAL_KEY);
    const fromUrl = new URL(window.location.href).searchParams.get("refresh");
    if (fromUrl !== null || saved !== null) {
      const want = fromUrl !== null ? fromUrl : saved;
      if (![...select.options].some((o) => o.value === want)) {
        select.append(el("option", {value: want}, want + " s"));
      }
      select.value = want;
    }
    select.addEventListener("change", () => {
      sessionStorage.setItem(INTERVAL_KEY, select.value);
      refresh();
    });
    document.getElementById("auth-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const value = document.getElementById("auth-token").value.trim();
      if (!value) return;
      token = value;
      sessionStorage.setItem(TOKEN_KEY, value);
      document.getElementById("auth-token").value = "";
      refresh();
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) refresh();
    });
    refresh();
  }

  start();
})();
