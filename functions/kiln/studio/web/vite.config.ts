import { defineConfig } from "vite";
import { svelte } from "@sveltejs/vite-plugin-svelte";

// The build is committed inside the Python package (../dist) and a test rebuilds it to prove
// the shipped files are the build of these sources: keep it deterministic (no timestamps,
// no environment-dependent paths, content-hashed names only).
export default defineConfig({
  base: "/studio/",
  plugins: [svelte()],
  build: {
    outDir: process.env.KILN_STUDIO_OUT ?? "../dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 1500,
  },
  test: {
    include: ["tests/**/*.test.ts"],
    environment: "node",
  },
});
