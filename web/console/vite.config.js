import { defineConfig } from 'vite'
import preact from '@preact/preset-vite'

// Built into internal/console/dist, which `airlock serve` embeds (go:embed)
// and serves at /console/. scripts/setup.sh runs the build.
export default defineConfig({
  base: '/console/',
  plugins: [preact()],
  build: {
    outDir: '../../internal/console/dist',
    emptyOutDir: false, // keeps dist/.gitignore; setup.sh removes old assets
    chunkSizeWarningLimit: 2000,
    sourcemap: false
  }
})
