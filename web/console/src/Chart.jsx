import { useEffect, useRef } from 'preact/hooks'
import uPlot from 'uplot'
import 'uplot/dist/uPlot.min.css'

/**
 * A uPlot line chart. data = [xs (unix seconds), ys1, ys2, …]; series =
 * [{label, stroke}]; fmt formats y values.
 */
export function Chart ({ title, data, series, fmt, height = 160, bars = false, window: win, ymax }) {
  const box = useRef(null)
  const plot = useRef(null)
  useEffect(() => {
    const width = Math.max(240, box.current.clientWidth || 400)
    const opts = {
      width,
      height,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      // win (seconds): show the last win seconds up to now, so one sample is not
      // stretched over years by the auto-range.
      scales: {
        x: win ? { time: true, range: () => { const now = Date.now() / 1000; return [now - win, now] } } : { time: true },
        // ymax: a fixed 0…ymax scale (capacity), so small changes do not fill the chart.
        y: ymax ? { range: () => [0, ymax] } : {}
      },
      axes: [{}, { values: (u, vals) => vals.map((v) => (fmt ? fmt(v) : v)), size: 84 }],
      series: [{}, ...series.map((s) => ({
        label: s.label,
        stroke: s.stroke,
        fill: s.fill,
        width: 2,
        value: (u, v) => (v == null ? '–' : fmt ? fmt(v) : v),
        paths: bars ? uPlot.paths.bars({ size: [0.8, 40] }) : undefined
      }))]
    }
    plot.current = new uPlot(opts, data, box.current)
    const onResize = () => plot.current && plot.current.setSize({ width: Math.max(240, box.current.clientWidth), height })
    window.addEventListener('resize', onResize)
    return () => { window.removeEventListener('resize', onResize); plot.current.destroy(); plot.current = null }
  }, [series.length, bars, ymax])
  useEffect(() => { if (plot.current) plot.current.setData(data) }, [data])
  return (
    <div class="chart">
      <div class="chart-title">{title}</div>
      <div ref={box} />
    </div>
  )
}
