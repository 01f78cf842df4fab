// Opens a GGUF model with the public API alone (<tensorpc/model.h>), prints
// its versions, the prompt's token count, and a few greedy tokens.
// Usage: example MODEL.gguf
#include <tensorpc/model.h>
#include <tensorpc/version.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  std::printf("tensorpc %s, protocol %s\n", tensorpc::kProjectVersion, tensorpc::kProtocolVersion);

  tensorpc::ModelOptions options;
  options.path = argv[1];
  options.threads = 2;
  options.context_size = 64;
  auto model = tensorpc::Model::open(options);
  if (!model.ok()) {
    std::fprintf(stderr, "example: %s\n", model.status().to_string().c_str());
    return 1;
  }
  const std::string prompt = "In the beginning";
  std::printf("prompt: %zu tokens\n", model.value().tokenize(prompt).size());

  tensorpc::GenerationOptions g;
  g.max_tokens = 8;
  g.sampling.temperature = 0;  // greedy
  std::printf("%s", prompt.c_str());
  auto text = model.value().generate(prompt, g, [](std::string_view piece, int32_t) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    return true;
  });
  std::printf("\n");
  if (!text.ok()) {
    std::fprintf(stderr, "example: %s\n", text.status().to_string().c_str());
    return 1;
  }
  std::printf("generated: %zu tokens\n", text.value().tokens.size());
  return 0;
}
