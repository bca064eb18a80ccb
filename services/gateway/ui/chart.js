// chart.js: a line chart on a canvas, drawn by hand (no library). Points
// are {t: ms, v: number|null}; null leaves a gap.
export function drawChart(canvas, points, { windowMs = 5 * 60 * 1000, unit = '' } = {}) {
  const ctx = canvas.getContext('2d');
  const w = canvas.width;
  const h = canvas.height;
  const pad = { l: 44, r: 8, t: 8, b: 18 };
  ctx.clearRect(0, 0, w, h);
  const now = Date.now();
  const shown = points.filter((p) => p.t >= now - windowMs);
  const values = shown.map((p) => p.v).filter((v) => v !== null && Number.isFinite(v));
  const max = Math.max(1e-9, ...values) * 1.1 || 1;
  ctx.strokeStyle = '#d8d8dc';
  ctx.fillStyle = '#6b6b70';
  ctx.font = '11px system-ui, sans-serif';
  ctx.lineWidth = 1;
  for (let i = 0; i <= 2; i++) {
    const y = pad.t + ((h - pad.t - pad.b) * i) / 2;
    ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
    const v = max * (1 - i / 2);
    ctx.fillText(`${v >= 10 ? v.toFixed(0) : v.toFixed(2)}${unit}`, 2, y + 4);
  }
  ctx.fillText(`-${Math.round(windowMs / 60000)} min`, pad.l, h - 4);
  ctx.fillText('now', w - pad.r - 22, h - 4);
  const x = (t) => pad.l + ((w - pad.l - pad.r) * (t - (now - windowMs))) / windowMs;
  const y = (v) => h - pad.b - ((h - pad.t - pad.b) * v) / max;
  ctx.strokeStyle = '#2060c0';
  ctx.lineWidth = 2;
  ctx.beginPath();
  let open = false;
  for (const p of shown) {
    if (p.v === null || !Number.isFinite(p.v)) { open = false; continue; }
    if (open) ctx.lineTo(x(p.t), y(p.v)); else ctx.moveTo(x(p.t), y(p.v));
    open = true;
  }
  ctx.stroke();
  // Dots too: a lone point between gaps has no line to show it.
  ctx.fillStyle = '#2060c0';
  for (const p of shown) {
    if (p.v === null || !Number.isFinite(p.v)) continue;
    ctx.beginPath(); ctx.arc(x(p.t), y(p.v), 2.5, 0, 2 * Math.PI); ctx.fill();
  }
  canvas.dataset.points = String(values.length);
  canvas.dataset.max = String(values.length ? Math.max(...values) : 0);
}
